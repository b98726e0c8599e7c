#!/usr/bin/env bash
# Install what the testbed needs on a fresh Debian/Ubuntu machine; safe to run again.
# Run as root (Mininet needs it): Debian packages for Mininet and tc/ethtool, the eBPF
# switch target's compiler and tools (clang, llvm, libbpf-dev, bpftool; clang also builds the
# native worker data path, hosts/switchml/native, on first use), bubblewrap (the grader's
# sandbox, labs/sandbox.py), and a
# virtualenv (.venv) with the Python dependencies from pyproject.toml. The venv sees the
# system site-packages because Mininet's Python package comes from Debian's mininet.
# With --torch also PyTorch (the optional extra `torch`, ~5.5 GB, for the gloo method).
# Always the `docs` extra (mkdocs-material), so the tests can build the documentation site.
# With --cluster also openssh-server, which every server of a cluster run needs (docs/cluster.md) and the cluster tests' second server runs; not by default, because
# installing it would put an sshd on every machine that only runs the testbed on its own.
# With --user, no root: only .venv and its Python packages (no Debian package, no eBPF
# object), which is all the simulated clock (run_experiment.py --simulate) and the analysis
# need; it needs python3 >= 3.11 with its venv module (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="test,notebooks,docs"
cluster_packages=()
user_only=false
for option in "$@"; do
  case "$option" in
    --torch) extras="$extras,torch" ;;
    --cluster) cluster_packages=(openssh-server openssh-client) ;;
    --user) user_only=true ;;
    *) echo "usage: bootstrap.sh [--torch] [--cluster] [--user]" >&2; exit 2 ;;
  esac
done

# Mininet's Python package is Debian's, for Debian's python3; --user takes the python3 on the PATH.
python=/usr/bin/python3
if [ "$user_only" = true ]; then
  python=python3
  if [ "${#cluster_packages[@]}" -gt 0 ]; then
    echo "bootstrap.sh: --cluster installs Debian packages, which needs root; --user installs none" >&2
    exit 2
  fi
  if ! "$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "bootstrap.sh --user: needs python3 >= 3.11 with its venv module (Debian: apt install python3-venv, as root)" >&2
    exit 1
  fi
elif [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap.sh: run as root (Mininet and the Debian packages need it); without root, bootstrap.sh --user" \
       "installs what the simulated clock (--simulate) and the analysis need" >&2
  exit 1
fi

install_debian_packages() {
  local packages=(mininet bridge-utils iputils-ping iproute2 ethtool procps python3 python3-venv python3-pip shellcheck
                  clang llvm libbpf-dev bpftool bubblewrap "${cluster_packages[@]}")
  local missing=()
  for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "bootstrap.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}
[ "$user_only" = true ] || install_debian_packages

if [ ! -x .venv/bin/python ]; then
  # The system's packages stay visible also with --user: a later run as root adds Mininet there.
  "$python" -m venv --system-site-packages .venv
fi
stamp=".venv/.installed-$( (cat pyproject.toml "$0"; echo "$extras") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # pip stops half-way with "No space left on device" otherwise: say it before starting.
  # PyTorch's CUDA build takes ~6 GB in .venv, the rest ~0.6 GB (measured on Debian 12).
  need_gb=1
  case ",$extras," in *,torch,*) need_gb=7 ;; esac
  free_gb=$(( $(df -Pk . | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
  if [ "$free_gb" -lt "$need_gb" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "bootstrap.sh: .venv needs ~$need_gb GB free on the file system of $(pwd), which has $free_gb GB (df -h .)" >&2
    exit 1
  fi
  echo "bootstrap.sh: installing Python dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$extras]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi

if [ "$user_only" = true ]; then
  echo "bootstrap.sh --user: .venv is ready for the simulated clock (run_experiment.py CONFIG --simulate) and the" \
       "analysis (python -m analysis); emulated runs need root: sudo ./scripts/bootstrap.sh" >&2
  exit 0
fi

# The eBPF switch's object for the default k and max_pool_size (cached under build/ebpf/; a run
# with another k or pool size builds its own on first use).
.venv/bin/python -c "from protocol.switchml import params; from switches.ebpf.switchml.compile import CompileOptions, compile_program; \
compile_program(CompileOptions(k=params.DEFAULT_K))"
