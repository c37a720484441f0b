"""The launcher itself: a 2-process job sums across processes, and a failing or hanging child
ends the job at once with every child's output."""

import time

import launcher
import pytest

_PSUM = """
import launcher
launcher.initialize()
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
counts = (jax.process_count(), jax.device_count())
assert counts == (2, 4), counts
mesh = jax.make_mesh((4,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
local = np.full((2,), jax.process_index() + 1.0, np.float32)
x = jax.make_array_from_process_local_data(jax.NamedSharding(mesh, P("d")), local, (4,))
total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v.sum(), "d"), mesh=mesh,
                              in_specs=P("d"), out_specs=P()))(x)
print("total", float(total))
"""


def test_two_processes_sum_across_the_job():
  finished = launcher.run(["-c", _PSUM], timeout=120)
  assert [f.returncode for f in finished] == [0, 0]
  for f in finished:
    assert "total 6.0" in f.output, f.output


def test_a_failing_process_ends_the_job_at_once_with_its_output():
  script = lambda i: ["-c", "import sys; sys.exit(3)" if i == 1 else "import time; time.sleep(60)"]
  start = time.monotonic()
  with pytest.raises(launcher.JobFailed, match="process 1 \\(exit status 3\\)"):
    launcher.run(script, timeout=60)
  assert time.monotonic() - start < 30


def test_a_job_past_its_timeout_is_killed():
  start = time.monotonic()
  with pytest.raises(launcher.JobFailed, match="did not finish in 2 s"):
    launcher.run(["-c", "print('started', flush=True); import time; time.sleep(60)"], timeout=2)
  assert time.monotonic() - start < 20
