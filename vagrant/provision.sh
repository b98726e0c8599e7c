#!/usr/bin/env bash
# Provision the testbed VM (Ubuntu 22.04): p4c and bmv2 from the p4lang packages on the
# openSUSE build service, Mininet, p4-utils, and the project's virtualenv in $REPO_DIR/.venv.
# Runs as root from the Vagrantfile; safe to run again (`vagrant provision`).
set -euo pipefail

REPO_DIR="${REPO_DIR:-/vagrant}"
VENV="${REPO_DIR}/.venv"
VENV_PROMPT="switchml-vm"
PYTHON=python3.11 # the project needs Python >= 3.11; Ubuntu 22.04's python3 is 3.10
P4LANG_REPO="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_22.04"
P4LANG_KEYRING=/etc/apt/keyrings/p4lang.gpg
P4LANG_SOURCES=/etc/apt/sources.list.d/p4lang.list
P4UTILS_GIT="git+https://github.com/nsg-ethz/p4-utils.git"
export DEBIAN_FRONTEND=noninteractive

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'provision.sh: %s\n' "$*" >&2
	exit 1
}

# shellcheck source=/dev/null
. /etc/os-release
[[ "${VERSION_ID}" == "22.04" ]] || die "expects Ubuntu 22.04, found ${PRETTY_NAME}"
[[ -f "${REPO_DIR}/pyproject.toml" ]] || die "${REPO_DIR} is not the repository (no pyproject.toml)"

say "p4lang package repository"
apt-get update
apt-get install -y --no-install-recommends ca-certificates curl gnupg
install -d -m 0755 /etc/apt/keyrings
if [[ ! -s "${P4LANG_KEYRING}" ]]; then
	curl -fsSL "${P4LANG_REPO}/Release.key" | gpg --dearmor --yes -o "${P4LANG_KEYRING}"
fi
echo "deb [signed-by=${P4LANG_KEYRING}] ${P4LANG_REPO}/ /" >"${P4LANG_SOURCES}"

say "p4c, bmv2, Mininet, Python ${PYTHON}"
apt-get update
apt-get install -y --no-install-recommends \
	p4lang-p4c p4lang-bmv2 \
	mininet iproute2 iputils-ping ethtool tcpdump \
	"${PYTHON}" "${PYTHON}-venv" python3-thrift git

for tool in p4c simple_switch mn; do
	command -v "${tool}" >/dev/null || die "${tool} is not on PATH after installing the packages"
done

say "virtualenv ${VENV}"
if [[ -d "${VENV}" ]] && ! grep -q "^prompt = '\?${VENV_PROMPT}'\?$" "${VENV}/pyvenv.cfg" 2>/dev/null; then
	# A .venv made on the host shares this synced folder; never overwrite someone's venv.
	die "${VENV} exists but was not made by this VM (no prompt ${VENV_PROMPT} in pyvenv.cfg); move it away and rerun 'vagrant provision'"
fi
if [[ ! -x "${VENV}/bin/python" ]]; then
	# System site packages: Mininet and bmv2's Thrift bindings come from apt, not PyPI.
	"${PYTHON}" -m venv --system-site-packages --prompt "${VENV_PROMPT}" "${VENV}"
fi
"${VENV}/bin/python" -m pip install --upgrade pip
"${VENV}/bin/python" -m pip install -e "${REPO_DIR}[test,docs]"

say "bmv2 Thrift bindings for ${PYTHON}"
if ! "${VENV}/bin/python" -c 'import bm_runtime, sswitch_runtime, bmpy_utils' 2>/dev/null; then
	# The bmv2 package installs them for the system python3 (3.10); they are plain Python.
	bindings_dir="$(python3 -c 'import os, bm_runtime; print(os.path.dirname(os.path.dirname(bm_runtime.__file__)))')" ||
		die "bmv2's Python bindings (bm_runtime) are not importable by python3 either"
	site_dir="$("${VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	echo "${bindings_dir}" >"${site_dir}/bmv2-bindings.pth"
fi
if ! "${VENV}/bin/python" -c 'import thrift.Thrift' 2>/dev/null; then
	"${VENV}/bin/python" -m pip install thrift
fi

say "p4-utils"
if ! "${VENV}/bin/python" -c 'import p4utils.utils.sswitch_thrift_API' 2>/dev/null; then
	# --no-deps: p4-utils pins grpcio/protobuf versions without Python 3.11 wheels, and the
	# Thrift API this testbed uses needs none of them -- only thrift, bmv2's bindings, and
	# psutil, which p4utils.utils imports at package level.
	"${VENV}/bin/python" -m pip install psutil
	"${VENV}/bin/python" -m pip install --no-deps "${P4UTILS_GIT}"
fi

say "check"
"${VENV}/bin/python" - <<'PY'
from switches.targets import lookup, resolve_target

missing = lookup("bmv2").detect()
if missing:
    raise SystemExit(f"bmv2 target still lacks: {', '.join(missing)}")
import p4utils.utils.sswitch_thrift_API  # noqa: F401  (imports bmv2's bindings too)
print("switch target:", resolve_target("auto"))
PY
p4c --version
simple_switch --version
say "done: vagrant ssh -c 'cd ${REPO_DIR} && sudo .venv/bin/python run_experiment.py configs/8workers.yaml --switch bmv2'"
