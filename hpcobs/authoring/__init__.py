"""What content is written with, and the one layer content imports: the context, rule, alert, test-case,
synthetic-series, dashboard and log-rule builders."""
