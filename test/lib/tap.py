"""TAP output for the Python test scripts, with no dependencies (the GPU
machine's scripts import it too).

    tap = Tap(diag_lines=20)
    tap.check(ok, "what was checked", diagnostic)
    return tap.done()
"""
import sys


class Tap:
    """Numbered TAP lines; a failed check prints its diagnostic under it as
    comments, at most diag_lines of them (all when None)."""

    def __init__(self, diag_lines=None):
        self.results = []
        self.diag_lines = diag_lines

    def check(self, ok, description, diagnostic=None):
        self.results.append(ok)
        print(("ok" if ok else "not ok") + f" {len(self.results)} - {description}")
        if diagnostic is not None and not ok:
            for line in str(diagnostic).strip().splitlines()[:self.diag_lines]:
                print("# " + line)
        # flushed at once: a suite that hangs or dies still shows how far it got
        sys.stdout.flush()

    def done(self):
        """Print the plan line; return the exit status, 0 when every check passed."""
        print(f"1..{len(self.results)}")
        return 0 if all(self.results) else 1
