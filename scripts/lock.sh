#!/usr/bin/env bash
# Every environment the project installs, locked by uv (exact versions, every file's hash) under
# locks/ (and the layer's layers/core/requirements.txt). The test venv's lock is the master: every
# other environment is compiled under its versions, so what ships is what the tests ran.
#
#   scripts/lock.sh            pyproject.toml or an .in file changed: re-lock, keeping every pin
#                              that still satisfies them (make lock)
#   scripts/lock.sh --upgrade  move every pin to the newest release allowed (make lock-upgrade)
#   scripts/lock.sh --check    exit 1, naming the files, when the locks and pyproject.toml disagree
set -euo pipefail
cd "$(dirname "$0")/.."
UV="${UV:-uv}"
mode="${1:-}"
out=locks
layer_out=layers/core/requirements.txt
case "$mode" in
  --check)
    out="$(mktemp -d)"
    cp locks/*.txt "$out"/
    cp "$layer_out" "$out/layer.txt"
    layer_out="$out/layer.txt"
    ;;
esac
upgrade=()
# the index afresh too: a cached listing once offered a release whose files it did not yet have
[ "$mode" = --upgrade ] && upgrade=(--upgrade --refresh)
# PyTorch's CPU wheel (torch==2.13.0+cpu): this kind of machine holds it in /opt/wheels; elsewhere
# PyTorch's CPU index serves the same file (the same hash).
if [ -e /opt/wheels ]; then
  torch_source=(--find-links /opt/wheels)
else
  torch_source=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi
# The master's versions as a constraint (no hashes), at a fixed path: the locks' "via" notes
# name it, and --check compares them
pins=.cache/lock/test-pins.txt
mkdir -p "$(dirname "$pins")"

# compile NAME PYTHON EXTRAS [uv arguments...]: pyproject.toml's EXTRAS (comma-separated, "-" for
# none) for PYTHON on x86_64 Linux into $out/NAME.txt
compile() {
  local name="$1" python="$2" extras="$3" target
  shift 3
  local extra_args=()
  if [ "$extras" != - ]; then
    for extra in ${extras//,/ }; do extra_args+=(--extra "$extra"); done
  fi
  target="$out/$name.txt"
  [ "$name" = layer ] && target="$layer_out"
  "$UV" pip compile --quiet --generate-hashes --custom-compile-command "make lock" \
    --python-version "$python" --python-platform x86_64-manylinux_2_28 \
    "${torch_source[@]}" "${upgrade[@]}" "${extra_args[@]}" -o "$target" "$@"
}

# The master: the dev and test venv (make test, make lint), python3.11 as on these machines.
compile test 3.11 dev,torch,paddle pyproject.toml locks/build.in
# Every other lock takes the master's versions: no hashes (pip would then require them of
# everything, the package's own directory included), no local labels (torch==2.13.0 matches
# PyTorch's 2.13.0+cpu and PyPI's 2.13.0 alike)
sed -n 's/^\([A-Za-z0-9._-]*\(\[[^]]*\]\)\?==[^ +]*\).*/\1/p' "$out/test.txt" >"$pins"
under=(--constraint "$pins")

# make dev's venv and its optional runtimes (TORCH=1, TORCHSERVE=1, ...): python3.11
compile dev 3.11 local,images pyproject.toml locks/build.in "${under[@]}"
for extra in torch torchserve paddle tensorflow openvino; do
  compile "dev-$extra" 3.11 "local,images,$extra" pyproject.toml locks/build.in "${under[@]}"
done
compile peer-stubs 3.11 - locks/peer-stubs.in --no-deps "${under[@]}"

# The shipped environments: python3.12, the functions' runtime and the images' Python.
compile infer 3.12 images,openvino pyproject.toml locks/infer.in "${under[@]}"
compile infer-paddle 3.12 images,openvino,paddle pyproject.toml locks/infer.in "${under[@]}"
compile infer-tensorflow 3.12 images,openvino,tensorflow pyproject.toml locks/infer.in "${under[@]}"
compile manage 3.12 openvino pyproject.toml "${under[@]}"
compile serve-cpu 3.12 server,images,openvino pyproject.toml "${under[@]}"
compile serve-cpu-tensorflow 3.12 server,images,openvino,tensorflow pyproject.toml "${under[@]}"
compile gpu 3.12 server,images pyproject.toml "${under[@]}"
# CoreLayer (sam build, BuildMethod python3.12) reads layers/core/requirements.txt; boto3 is the
# Lambda runtime's own (locks/layer.in does not name it; botocore comes for aws-xray-sdk).
compile layer 3.12 - locks/layer.in "${under[@]}"

# The same pins, committed: the torch variants' images resolve under them (PyTorch's wheels are
# not on PyPI, so those images cannot install a hashed lock)
cp "$pins" "$out/test-pins.txt"

if [ "$mode" = --check ]; then
  status=0
  for file in "$out"/*.txt; do
    name="$(basename "$file")"
    committed="locks/$name"
    [ "$name" = layer.txt ] && committed=layers/core/requirements.txt
    if ! diff -q "$committed" "$file" >/dev/null; then
      echo "lock: $committed disagrees with pyproject.toml or its .in file (run make lock):" >&2
      diff -u "$committed" "$file" | head -30 >&2
      status=1
    fi
  done
  rm -rf "$out"
  [ "$status" -eq 0 ] && echo "lock: every lock agrees with pyproject.toml" >&2
  exit "$status"
fi
