"""User-facing errors: printed as one line per problem, exit code 2, never a traceback."""


class UserError(Exception):
    """Bad input from the user (config, flags, environment). Each line names file, field and fix."""

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class ToolError(UserError):
    """An external tool (promtool, amtool, a server) is missing, too old, or failed to run."""
