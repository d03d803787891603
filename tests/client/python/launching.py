"""launching: a test's script run as the workers of `troupe launch --local`, for tests
that check what a launched user's loop does."""
import os
import subprocess
import sys
import textwrap

TROUPE = os.environ.get("TROUPE_BIN", "troupe")


def launched(tmp_path, script_text, *flags):
    """Runs `script_text` (dedented) as both workers of `troupe launch --local --workers 2
    FLAGS`, and returns the finished launch, which must have succeeded."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(script_text))
    p = subprocess.run([TROUPE, "launch", "--local", "--workers", "2", *flags, "--metrics", "off",
                        "--job-dir", str(tmp_path / "job"), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=300, env=os.environ)
    assert p.returncode == 0, p.stderr[-3000:]
    return p
