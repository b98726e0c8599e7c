#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: the course's
# fork (this bundle's files, unpacked in /autograder/source) made a git checkout of one
# commit again (an instructor's grade copies only committed files), and its environment
# set up as on any machine. Made by `python -m labs gradescope N` (labs/README.md).
set -euo pipefail
cd /autograder/source
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends git python3 python3-venv util-linux iproute2 ca-certificates
git init -q
git add -A
git -c user.name=autograder -c user.email=autograder@localhost commit -q -m "the course's fork, as bundled"
./scripts/bootstrap.sh
