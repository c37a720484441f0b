"""Ablation: FastAP's number of histogram bins L (Cakir et al. 2019, Fig. 4b).

The claim. FastAP quantises the distances of each list into a histogram of L bins. Cakir et al.
(2019, Sec. 5.3 "Distance Quantization", Fig. 4b: ResNet-18, batch 256, R@1 on Stanford Online
Products, In-Shop and VehicleID) find that more bins, a closer approximation of AP, do not train
better: R@1 "consistently peaks around 10 bins", because coarse bins keep positives and negatives
that are separated by a small margin in the same bin, where they still get a gradient (Fig. 4c).

Command (each value trains `loss="fastap", loss_kwargs={"num_bins": L}` for the config's 300
steps; `--values 5 10` sweeps other values, `--set field=value` changes the base config):

    python -m experiments.ablate_fastap_bins                 # runs/ablate_fastap_bins/
    python -m experiments.ablate_fastap_bins --set seed=1 --workdir runs/ablate_fastap_bins_seed1

What it printed on 2026-11-23 (2-core CPU, 43 s in all; `time` is each run's wall time):

    Test split (classes unseen in training), experiments/configs/digits.py:

    bins         R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.980  0.985  0.991  0.994  0.483      0.536     3s
    L=5        0.965  0.982  0.990  0.996  0.542      0.958    11s
    L=10       0.970  0.983  0.990  0.994  0.546      0.970     6s
    L=20       0.974  0.987  0.992  0.994  0.559      0.971     6s
    L=40       0.977  0.985  0.992  0.996  0.582      0.975    11s
    L=80       0.978  0.989  0.997  0.999  0.581      0.976     6s

    Total 43 s; plot in runs/ablate_fastap_bins/fastap_bins.png

and with `--set seed=1` (another initialisation and other batches; 38 s):

    Test split (classes unseen in training), experiments/configs/digits.py seed=1:

    bins         R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.980  0.985  0.992  0.996  0.521      0.512     2s
    L=5        0.975  0.985  0.988  0.996  0.547      0.952    11s
    L=10       0.975  0.987  0.992  0.994  0.552      0.965     6s
    L=20       0.983  0.990  0.993  0.997  0.563      0.970     6s
    L=40       0.987  0.991  0.996  0.998  0.570      0.972     6s
    L=80       0.984  0.990  0.997  0.998  0.570      0.973     6s

    Total 38 s; plot in runs/ablate_fastap_bins_seed1/fastap_bins.png

What the run shows. It does not agree with the paper: on the unseen digits MAP@R grows with the
number of bins up to L=40 and then stays level (L=80 within 0.001), in both seeds (+0.04 and +0.02
from L=5 to L=40), and R@1 grows with it (0.965 to 0.977-0.978, and 0.975 to 0.984-0.987); there is
no peak at 10, which is among the worst values in both seeds. Every L beats the untrained network
on MAP@R; only L >= 20 (seed 1) or none (seed 0) also matches it on R@1, which is at its ceiling
here (see experiments/configs/digits.py). The level of everything moves with the seed (the
untrained network alone gives MAP@R 0.483 or 0.521), so compare rows within a table, not across
tables. A likely reason is where training starts: the untrained network's cosine similarities
within a batch all lie in about [0.98, 1.00] (a spread of ~0.02 per query), i.e. squared distances
below 0.04, while FastAP's bins split [0, 4] into L intervals of width 4 / L: at L=10 a bin is 0.4
wide, 10 times the whole initial spread, so each list starts within one bin, its order inside the
bin invisible to the loss; at L=40 (0.1 wide) the first steps already see part of the ranking,
and beyond that the bins are finer than what matters. The paper starts from an ImageNet-initialised
ResNet whose distances are spread out, where coarse bins lose little and their tolerance of small
margins can help. Also, every L fits the five training digits well (seen MAP@R 0.95-0.98), so what
is compared is how well a fit of five classes transfers to five others, which the paper's hundreds
of training classes do not test. The main job (experiments/configs/digits.py) trains FastAP with
40 bins for this reason.
"""

from __future__ import annotations

from experiments import ablation

VALUES = (5, 10, 20, 40, 80)


def main(argv=None):
  return ablation.main(
      argv, what="fastap_bins", doc=__doc__, values=VALUES,
      overrides=lambda base, num_bins: ablation.loss_overrides(base, "fastap", num_bins=num_bins),
      name=lambda c: f"L={c.loss_kwargs['num_bins']}", column="bins",
      point=lambda c: (c.loss_kwargs["num_bins"], None), xlabel="FastAP histogram bins L",
      log_x=True,
  )


if __name__ == "__main__":
  main()
