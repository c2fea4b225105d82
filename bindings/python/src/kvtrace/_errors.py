"""The package's exceptions: one line, `PATH: what is wrong`, as the C tool's messages."""


class TraceError(ValueError):
    """A kvtrace file or directory is missing or invalid. The message is one line, `PATH: what is wrong`."""

    def __init__(self, path, what):
        self.path = str(path)
        self.what = str(what).replace("\r", " ").replace("\n", " ")
        super().__init__("%s: %s" % (self.path, self.what))


class ResultsError(TraceError):
    """A results, analysis or study directory (or one of its files) is missing or invalid."""
