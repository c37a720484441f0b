"""Ablation: ROADMAP's weight lambda between SupAP and calibration (Ramzi et al. 2021, Fig. 4a).

The claim. ROADMAP (Ramzi et al. 2021, eq. 2) trains `(1 - lambda) L_SupAP + lambda L_calibr`. Their
Fig. 4a (iNaturalist, batch 224, Sec. 4.3) shows that the combination "is always better than using
only one of the two losses" (lambda = 0 is SupAP alone, lambda = 1 calibration alone), with results
stable over lambda in [0.2, 0.8] and about +1.5 points over the ends.

Command (each value trains `loss="roadmap", loss_kwargs={"lam": lambda}`, the other
hyperparameters at the paper's values unless the base config trains roadmap with its own):

    python -m experiments.ablate_roadmap_lambda              # runs/ablate_roadmap_lambda/
    python -m experiments.ablate_roadmap_lambda --set seed=1 \\
        --workdir runs/ablate_roadmap_lambda_seed1

What it printed on 2026-11-22 (2-core CPU shared with other jobs, 102 s in all; `time` is each
run's wall time):

    Test split (classes unseen in training), experiments/configs/digits.py:

    lambda       R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.978  0.983  0.992  0.996  0.487      0.507     7s
    lam=0      0.969  0.985  0.994  0.996  0.555      0.995    22s
    lam=0.25   0.973  0.989  0.994  0.996  0.533      0.996    17s
    lam=0.5    0.971  0.984  0.992  0.994  0.520      0.996    22s
    lam=0.75   0.970  0.984  0.990  0.994  0.501      0.996    11s
    lam=1      0.968  0.981  0.987  0.996  0.489      0.988    15s

    Total 93 s; plot in runs/ablate_roadmap_lambda/roadmap_lambda.png

and with `--set seed=1` (66 s):

    Test split (classes unseen in training), experiments/configs/digits.py seed=1:

    lambda       R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.971  0.983  0.990  0.994  0.438      0.487     4s
    lam=0      0.964  0.981  0.991  0.994  0.471      0.995    12s
    lam=0.25   0.956  0.982  0.989  0.992  0.448      0.996    10s
    lam=0.5    0.962  0.981  0.988  0.994  0.437      0.997    10s
    lam=0.75   0.953  0.975  0.989  0.992  0.431      0.996    11s
    lam=1      0.960  0.978  0.984  0.992  0.420      0.988    10s

    Total 59 s; plot in runs/ablate_roadmap_lambda_seed1/roadmap_lambda.png

What the run shows. It does not agree with the paper: MAP@R on the unseen digits falls steadily as
lambda grows, in both seeds (0.555 to 0.489 and 0.471 to 0.420), so SupAP alone is best and
calibration alone worst (no better than the untrained network); R@1 moves by 0.01 at most. The
trend (about -0.015 per 0.25 of lambda) is the same in both seeds and larger than the seed-to-seed
scatter of paired differences elsewhere (~0.01), so it is probably real at this scale. Two reasons
it may not carry over: calibration exists to make AP decompose over batches, i.e. to help when a
batch sees a small part of the data set, whereas every digits batch holds all five training
classes; and eq. 2 with a fixed learning rate also scales SupAP's gradient by (1 - lambda), so
larger lambda trains the ranking term more slowly (the authors' configs add the two losses with
weight 1 each, the `supap+calibration` loss of experiments/losses.py, which this sweep does not
vary).
"""

from __future__ import annotations

from experiments import ablation

VALUES = (0.0, 0.25, 0.5, 0.75, 1.0)


def main(argv=None):
  return ablation.main(
      argv, what="roadmap_lambda", doc=__doc__, values=VALUES,
      overrides=lambda base, lam: ablation.loss_overrides(base, "roadmap", lam=float(lam)),
      name=lambda c: f"lam={c.loss_kwargs['lam']:g}", column="lambda",
      point=lambda c: (c.loss_kwargs["lam"], None),
      xlabel="lambda (0: SupAP alone, 1: calibration alone)",
  )


if __name__ == "__main__":
  main()
