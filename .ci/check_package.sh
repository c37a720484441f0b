#!/usr/bin/env bash
# The package installs on its own: build the sdist and the wheel, check what each holds, install the
# wheel into a fresh virtual environment outside the repository and use jaxrank from a directory
# outside it, first the core alone (no TensorFlow, no Flax), then with the `train` extra.
#
# Usage: .ci/check_package.sh (or `make package-check`), from anywhere. Needs the repository's
# .venv with the `dev` extra (for `build`); set VENV to use another one. Prints the time each step
# takes; exits non-zero at the first failure. Everything it creates lives in one `mktemp -d`
# directory, removed at the end; pip's cache is reused.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build_python="${VENV:-$repo/.venv}/bin/python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export TF_CPP_MIN_LOG_LEVEL=2 PIP_DISABLE_PIP_VERSION_CHECK=1

step_start=$SECONDS
step() {  # step DESCRIPTION: announces a step and starts its clock.
  echo "package-check: $1"
  step_start=$SECONDS
}
done_step() {  # The time the step took.
  echo "package-check:   ok ($((SECONDS - step_start)) s)"
}
quietly() {  # quietly COMMAND...: runs COMMAND, and shows its output only if it fails.
  "$@" > "$work/log" 2>&1 || { cat "$work/log"; echo "package-check: failed: $*"; return 1; }
}

step "building the sdist, and the wheel from the sdist (python -m build)"
quietly "$build_python" -m build --outdir "$work/dist" "$repo"
sdist=("$work"/dist/jaxrank-*.tar.gz)
wheel=("$work"/dist/jaxrank-*.whl)
[[ ${#sdist[@]} == 1 && -f ${sdist[0]} && ${#wheel[@]} == 1 && -f ${wheel[0]} ]] || {
  echo "expected one sdist and one wheel in dist/, got:"; ls "$work/dist"; exit 1; }
done_step

step "checking the contents of the sdist and the wheel"
"$build_python" - "$repo" "${sdist[0]}" "${wheel[0]}" <<'EOF'
import pathlib
import sys
import tarfile
import zipfile

repo, sdist, wheel = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
# Every module of the package, as the repository has it.
package = {str(p.relative_to(repo)) for p in (repo / "jaxrank").rglob("*.py")
           if "__pycache__" not in p.parts}
with tarfile.open(sdist) as tar:
  # Names are "jaxrank-<version>/<path>".
  in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
with zipfile.ZipFile(wheel) as whl:
  in_wheel = set(whl.namelist())
problems = []
for need in sorted(package | {"README.md", "pyproject.toml"}):
  if need not in in_sdist:
    problems.append(f"sdist lacks {need}")
for need in sorted(package - in_wheel):
  problems.append(f"wheel lacks {need}")
for name in sorted(in_wheel):
  top = name.split("/", 1)[0]
  if top != "jaxrank" and not (top.startswith("jaxrank-") and top.endswith(".dist-info")):
    problems.append(f"wheel holds {name}, outside the package (tests, experiments, notebooks?)")
if problems:
  sys.exit("package-check: " + "\n  ".join(["the distributions are wrong:"] + problems))
print(f"package-check:   {len(package)} modules in both; the wheel holds only jaxrank/ and its "
      "dist-info")
EOF
done_step

cd "$work"  # From here on nothing runs inside the repository.

step "installing the wheel alone into a fresh virtual environment outside the repository"
"${PYTHON:-python3}" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
# By the build environment's uv where it has one (`make` installs it: a third of pip's time),
# else by pip; both resolve the wheel's dependencies from its metadata alone.
uv="$(dirname "$build_python")/uv"
install() {  # install REQUIREMENT: into the fresh environment.
  if [[ -x $uv ]]; then
    quietly "$uv" pip install --quiet --python "$venv_python" "$1"
  else
    quietly "$venv_python" -m pip install --quiet --no-compile "$1"
  fi
}
install "${wheel[0]}"
done_step

step "using the core: every name of jaxrank.__all__, a metric and a loss on a tiny input"
"$venv_python" - "$repo" <<'EOF'
import importlib.util
import pathlib
import sys

import jax.numpy as jnp
import jaxrank

repo = pathlib.Path(sys.argv[1]).resolve()
where = pathlib.Path(jaxrank.__file__).resolve()
assert repo not in where.parents, f"jaxrank was imported from the repository: {where}"
missing = [name for name in jaxrank.__all__ if not hasattr(jaxrank, name)]
assert not missing, f"jaxrank.__all__ names what jaxrank lacks: {missing}"
for extra in ("tensorflow", "flax"):
  assert importlib.util.find_spec(extra) is None, f"the core installs {extra}: it is `train` only"
scores, labels = jnp.array([[0.9, 0.8, 0.1, 0.4]]), jnp.array([[1, 0, 1, 0]])
ap = float(jaxrank.ap_metric(scores, labels))
assert abs(ap - 0.75) < 1e-6, ap  # Relevant items at ranks 1 and 4: (1/1 + 2/4) / 2.
loss = float(jaxrank.fastap_loss(scores, labels))
assert 0.0 <= loss <= 1.0, loss
print(f"package-check:   jaxrank {jaxrank.__version__} from {where.parent}; "
      f"{len(jaxrank.__all__)} public names; ap_metric {ap:.4f}, fastap_loss {loss:.4f}")
EOF
done_step

step "installing the train extra (jaxrank[train] from the wheel: Flax, TensorFlow, ...)"
install "jaxrank[train] @ file://${wheel[0]}"
quietly "$venv_python" -m pip check
done_step

step "using the train extra: jaxrank.models, jaxrank.data, load_digits('train')"
"$venv_python" - <<'EOF'
import jax.numpy as jnp
from flax import nnx

import jaxrank.data
import jaxrank.models

train = jaxrank.data.load_digits("train")
assert len(train.labels) > 0 and train.images.shape[0] == len(train.labels), train.images.shape
rngs = nnx.Rngs(0)
model = jaxrank.models.EmbeddingModel(
    jaxrank.models.SmallConvNet(1, features=(4,), rngs=rngs),
    jaxrank.models.EmbeddingHead(4, 2, rngs=rngs))
embeddings = model(jnp.asarray(train.images[:4], jnp.float32))
assert embeddings.shape == (4, 2), embeddings.shape
print(f"package-check:   load_digits('train'): {train.images.shape} images, "
      f"{len(set(train.labels.tolist()))} classes; a model embeds them to {embeddings.shape}")
EOF
done_step

step "removing the environment"
cd / && rm -rf "$work"
done_step
echo "package-check: passed in $SECONDS s"
