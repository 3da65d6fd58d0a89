"""No module of the harness over 500 lines (issue 30): a module that grows past it does more
than one job, and a reader of one check should not have to page through another's. Session
29's telemetry checks reached 533 unnoticed; this test names any module that does again."""

from pathlib import Path

import dd_accept

MOST_LINES = 500


def test_no_module_is_over_500_lines():
    root = Path(dd_accept.__file__).parent
    sizes = {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    assert len(sizes) > 100, "the package's modules were found"
    over = {name: lines for name, lines in sizes.items() if lines > MOST_LINES}
    assert not over, f"modules over {MOST_LINES} lines: {over}"
