"""The site configuration: loading and merging, the schema and the checks across keys, how content declares a
threshold and the settings files generated from those declarations (the typed thresholds among them), and the names
(dashboard uids, teams) configuration and content share."""
