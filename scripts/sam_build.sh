#!/usr/bin/env bash
# `sam build` of the zip functions and the layer (the images need a Docker engine).
# Usage: scripts/sam_build.sh PATH_TO_SAM
set -euo pipefail
cd "$(dirname "$0")/.."
SAM="${1:-sam}"
export SAM_CLI_TELEMETRY=0
if [ -d "$HOME/.pyenv/versions/3.12.1" ] && ! command -v python3.12 >/dev/null 2>&1; then
  export PYENV_VERSION=3.11.7:3.12.1
fi
if ! python3.12 --version >/dev/null 2>&1; then
  echo "sam_build.sh: skipped: sam build needs python3.12 on PATH (the functions' runtime)" >&2
  exit 0
fi
export PYENV_VERSION="${PYENV_VERSION:-3.11.7:3.12.1}"
functions=(CoreLayer ManageEventsFunction ReconcileFunction ManageApiFunction BatcherFunction)
for resource in "${functions[@]}"; do
  "$SAM" build "$resource" --build-dir .aws-sam/build --cached --parallel
done
echo "sam_build.sh: built ${functions[*]} into .aws-sam/build"
du -sh .aws-sam/build/CoreLayer 2>/dev/null || true
