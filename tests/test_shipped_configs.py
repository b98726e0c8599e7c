"""A config named by its path in the testbed's tree (``configs/8workers.yaml``) is found from
any folder, as an installed testbed needs (docs/install.md); a file of the user's at that
path always wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config import CONFIG_DIR
from protocol.params import REPO_ROOT

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)


def dry_run(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), "configs/8workers.yaml", "--dry-run", "--simulate"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=cwd, check=False)


def test_a_shipped_config_is_found_from_another_folder(tmp_path: Path) -> None:
    done = dry_run(tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(f"experiment 8workers ({CONFIG_DIR / '8workers.yaml'})"), done.stderr


def test_a_users_own_file_wins_over_the_shipped_one(tmp_path: Path) -> None:
    mine = tmp_path / "configs" / "8workers.yaml"
    mine.parent.mkdir()
    mine.write_text((CONFIG_DIR / "8workers.yaml").read_text().replace("\nname: 8workers\n", "\nname: mine\n"))
    done = dry_run(tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("experiment mine (configs/8workers.yaml)"), done.stdout + done.stderr
