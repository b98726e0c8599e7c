"""The Vagrant VM definition: the provisioning script is sound shell and is the one used."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from protocol.params import REPO_ROOT

VAGRANTFILE = REPO_ROOT / "Vagrantfile"
PROVISION = REPO_ROOT / "vagrant" / "provision.sh"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_provision_script_passes_shellcheck() -> None:
    result = subprocess.run(["shellcheck", "--shell=bash", str(PROVISION)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vagrantfile_provisions_with_the_script() -> None:
    text = VAGRANTFILE.read_text()
    assert re.search(r'provision\s+"shell",\s*path:\s*"vagrant/provision\.sh"', text)
    assert 'config.vm.box = "bento/ubuntu-22.04"' in text
    assert re.search(r"cpus\s*=\s*2\b", text) and re.search(r"memory\s*=\s*4096\b", text)


def test_provision_script_is_strict_and_installs_the_bmv2_toolchain() -> None:
    text = PROVISION.read_text()
    assert "set -euo pipefail" in text.splitlines()[:10]
    assert "download.opensuse.org/repositories/home:/p4lang/xUbuntu_22.04" in text
    for package in ("p4lang-p4c", "p4lang-bmv2", "mininet"):
        assert re.search(rf"\b{package}\b", text), package
    assert "--system-site-packages" in text and "pip install -e" in text
    assert "github.com/nsg-ethz/p4-utils" in text
