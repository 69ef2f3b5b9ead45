"""The output targets: one module per format a build writes into out/, each declaring its paths, files, checks,
diff section and docs (hpcobs.targets.base), all listed in hpcobs.targets.registry. Formats only: what the files
say is content, built by the build and handed to them."""
