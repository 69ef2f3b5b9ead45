"""The security content hpcobs ships: the names of its Falco rules and Tetragon tracing policies, and the
rules and policies themselves (docs/security-content.md)."""
