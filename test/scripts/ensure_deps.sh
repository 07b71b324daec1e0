#!/usr/bin/env bash
# Installs the Debian 12 packages that building, testing and the demo need,
# when any is missing.  Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
	make gcc
	postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap
	python3-numpy python3-sklearn python3-psycopg2
	dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "ensure_deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || { echo "ensure_deps: not root and no sudo: install ${missing[*]}" >&2; exit 1; }
	sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
