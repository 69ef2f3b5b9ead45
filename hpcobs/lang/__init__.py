"""The languages the output is written in and the checks on them: PromQL (normal form, comparisons, lint),
Prometheus' regex dialect, escaping for every language a config string reaches, label selectors, units, the
values that reach Falco and Tetragon, YAML and JSON rendering. Imports nothing else of hpcobs."""
