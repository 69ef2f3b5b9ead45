"""What happens to a build after it: the semantic review of two builds, deployment through Grafana's API."""
