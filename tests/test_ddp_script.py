"""hosts/ddp_script.py's running of a user's script, without Mininet: how its end is read.

Needs the optional torch extra (hosts/ddp_script.py imports it): skipped where it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_torch

pytestmark = [pytest.mark.torch]


def script_ending_with(tmp_path: Path, ending: str) -> str:
    script = tmp_path / "train.py"
    script.write_text("import sys\n\n\ndef main():\n    print('trained')\n\n\nif __name__ == '__main__':\n"
                      f"    {ending}\n")
    return str(script)


@pytest.mark.parametrize("ending", ["sys.exit(main())", "sys.exit(0)", "sys.exit()", "main()", "raise SystemExit(0)"])
def test_a_script_that_exits_with_status_0_has_finished(tmp_path: Path, ending: str) -> None:
    require_torch()
    from hosts.ddp_script import run_script

    run_script(script_ending_with(tmp_path, ending))


@pytest.mark.parametrize(("ending", "said"), [("sys.exit(3)", r"sys.exit\(3\): exit status 3$"),
                                              ("sys.exit('diverged')", r"sys.exit\('diverged'\): exit status 1$")])
def test_a_script_that_exits_with_another_status_fails_naming_it(tmp_path: Path, ending: str, said: str) -> None:
    require_torch()
    from hosts.ddp_script import run_script

    script = script_ending_with(tmp_path, ending)
    with pytest.raises(RuntimeError, match=rf"^{script} called {said}"):
        run_script(script)
