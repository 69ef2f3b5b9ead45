"""The site configuration: loading and merging, the schema and the checks across keys, the typed thresholds
generated from the schema, and the names (dashboard uids, teams) configuration and content share."""
