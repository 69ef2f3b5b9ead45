"""What the exporters emit: the catalogue (every raw metric per exporter and version, with its source), the
sources (the catalogue bound to a site's exporter settings) and the labels real exporters put on their series."""
