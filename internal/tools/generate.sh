#!/usr/bin/env bash
# Generates each component's internal/metadata (type, stability, telemetry builder),
# internal/metadatatest, generated_component_test.go, generated_package_test.go and
# documentation.md from its metadata.yaml with mdatagen.
#
#   generate.sh          regenerate in place (make generate)
#   generate.sh --check  regenerate into a scratch copy and fail if a committed generated file
#                        differs, is missing or is left over (make lint)
#
# MDATAGEN names the mdatagen binary (the Makefile builds it from internal/tools/go.mod).
set -euo pipefail

: "${MDATAGEN:?MDATAGEN must name the mdatagen binary (make generate builds it)}"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mapfile -t dirs < <(find receiver processor connector -mindepth 2 -maxdepth 2 -name metadata.yaml -printf '%h\n' | sort)
if [ "${#dirs[@]}" -eq 0 ]; then
  echo "no metadata.yaml under receiver/, processor/ or connector/" >&2
  exit 1
fi

# generated lists the files mdatagen writes below a component directory.
generated() {
  find "$1" \( -path "$1/internal/metadata/*" -o -path "$1/internal/metadatatest/*" -o -path "$1/generated_*" -o -path "$1/documentation.md" \) \
    -type f \( -name 'generated_*' -o -name documentation.md \) -printf '%P\n' | sort
}

if [ "${1:-}" != "--check" ]; then
  for d in "${dirs[@]}"; do
    echo "mdatagen $d/metadata.yaml"
    (cd "$d" && "$MDATAGEN" metadata.yaml)
  done
  exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp go.mod "$scratch/"
stale=0
for d in "${dirs[@]}"; do
  mkdir -p "$scratch/$d"
  cp "$d/metadata.yaml" "$scratch/$d/"
  # mdatagen asks go list for the directory's import path: one file naming the package will do.
  echo "package $(basename "$d")" >"$scratch/$d/doc.go"
  (cd "$scratch/$d" && "$MDATAGEN" metadata.yaml)
  if ! diff -u <(generated "$d") <(generated "$scratch/$d") >/dev/null; then
    echo "$d: the generated files differ from what metadata.yaml gives:" >&2
    diff <(generated "$d") <(generated "$scratch/$d") | sed -n 's/^</  left over: /p; s/^>/  missing: /p' >&2 || true
    stale=1
  fi
  while read -r f; do
    if [ -f "$d/$f" ] && ! cmp -s "$d/$f" "$scratch/$d/$f"; then
      echo "$d/$f is stale:" >&2
      diff -u "$d/$f" "$scratch/$d/$f" | head -20 >&2 || true
      stale=1
    fi
  done < <(generated "$scratch/$d")
done
if [ "$stale" -ne 0 ]; then
  echo "generated files are stale: run make generate and commit the result" >&2
  exit 1
fi
echo "generated files are up to date (${dirs[*]})"
