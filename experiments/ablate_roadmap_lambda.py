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

What it printed on 2026-11-23 (2-core CPU, 39 s in all; `time` is each run's wall time):

    Test split (classes unseen in training), experiments/configs/digits.py:

    lambda       R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.980  0.985  0.991  0.994  0.483      0.536     2s
    lam=0      0.985  0.992  0.997  0.999  0.583      0.975     7s
    lam=0.25   0.983  0.991  0.997  0.999  0.574      0.976     6s
    lam=0.5    0.982  0.993  0.997  0.999  0.571      0.976     6s
    lam=0.75   0.984  0.991  0.997  1.000  0.562      0.973     6s
    lam=1      0.983  0.990  0.996  0.997  0.538      0.934    11s

    Total 39 s; plot in runs/ablate_roadmap_lambda/roadmap_lambda.png

and with `--set seed=1` (41 s):

    Test split (classes unseen in training), experiments/configs/digits.py seed=1:

    lambda       R@1    R@2    R@4    R@8  MAP@R seen MAP@R   time
    --------------------------------------------------------------
    untrained  0.980  0.985  0.992  0.996  0.521      0.512     3s
    lam=0      0.980  0.991  0.996  0.998  0.563      0.973     7s
    lam=0.25   0.982  0.990  0.998  0.998  0.562      0.974     7s
    lam=0.5    0.980  0.992  0.997  0.998  0.552      0.971    11s
    lam=0.75   0.979  0.993  0.997  0.999  0.540      0.965     7s
    lam=1      0.979  0.991  0.997  0.999  0.519      0.921     7s

    Total 41 s; plot in runs/ablate_roadmap_lambda_seed1/roadmap_lambda.png

What the run shows. It does not agree with the paper: MAP@R on the unseen digits falls as lambda
grows, in both seeds (0.583 to 0.538 and 0.563 to 0.519), so SupAP alone (lambda = 0) is best or
tied with lambda = 0.25, and calibration alone is worst (in seed 1 no better than the untrained
network); R@1 moves by 0.005 at most. The trend (about -0.01 per 0.25 of lambda up to 0.75, then a
larger drop) is the same in both seeds and larger than the seed-to-seed scatter of paired
differences elsewhere (~0.01), so it is probably real at this scale. Two reasons it may not carry
over: calibration exists to make AP decompose over batches, i.e. to help when a batch sees a small
part of the data set, whereas every digits batch holds all five training classes; and eq. 2 with a
fixed learning rate also scales SupAP's gradient by (1 - lambda), so larger lambda trains the
ranking term more slowly (the authors' configs add the two losses with weight 1 each, the
`supap+calibration` loss of experiments/losses.py, which this sweep does not vary).
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
