"""Ablation: hard (category-based) versus random class sampling for FastAP (Cakir 2019, Table 5).

The claim. FastAP (Cakir et al. 2019, Sec. 4.2 and App. A-B.1) draws "hard" batches: two categories
(super-classes, e.g. SOP's 'bicycle' and 'chair') per batch and classes from within them, so each
query meets hard negatives of its own category; the "random" strategy draws classes from the whole
training set. Table 5 (R@1): hard beats random on every data set and backbone, e.g. Online Products
72.3 -> 73.2 (ResNet-18) and 74.2 -> 75.8 (ResNet-50), In-Shop 81.7 -> 89.0 and 84.1 -> 90.0.

Here the two values are `sampler="super_class"` (hard: `jaxrank.data.super_class_batches`, with
`super_classes_per_batch` categories per batch, 2 by default, and 5 consecutive batches per set of
categories as FastAP does on SOP) and `sampler="m_per_class"` (random classes, K images each), both
training `loss="fastap"` with the base config's batch geometry.

The bundled digits have no super-classes (and their train split only five classes), so this
ablation cannot run on them: it stops with a ValueError, before training anything, saying to point
it at a data set that has them. On a prepared Stanford Online Products, e.g. with the photograph
config (ResNet-50, batch 128 = 32 classes x 4 images, 16 classes from each of 2 categories):

    python -m experiments.ablate_hard_sampling --config experiments/configs/cub200.py \\
        --set dataset=sop --set data_dir=DATA_DIR --workdir runs/ablate_hard_sampling_sop

(an image_folder tree `category/class/image` works too: `--set dataset=image_folder`). The batch
must hold a multiple of `super_classes_per_batch` classes; `train.check_config` checks this
before training.

What it printed on 2026-11-22 (2-core CPU), run with its defaults on the digits:

    $ python -m experiments.ablate_hard_sampling
    Traceback (most recent call last):
      ...
    ValueError: config.sampler='super_class' needs super-classes (categories such as SOP's
    'bicycle'), which digits does not have; use sampler='m_per_class', or dataset='sop' or an
    image_folder tree category/class/image.

What the run shows. Nothing about the claim: no data set with super-classes is prepared on this
machine (nothing is downloaded), and SOP with a ResNet is far beyond a 2-core CPU. The script runs
end to end on mock SOP data (tests/test_experiments.py: random smooth images, 24 classes in SOP's
12 categories), which checks the mechanics only; its numbers mean nothing. Expect the paper's gap
only where categories group visually similar classes and a batch holds a small fraction of the
classes, as on SOP (11,318 classes in 12 categories) or In-Shop.
"""

from __future__ import annotations

from experiments import ablation

VALUES = ("super_class", "m_per_class")  # Hard first: its data errors come before any training.


def main(argv=None):
  return ablation.main(
      argv, what="hard_sampling", doc=__doc__, values=VALUES,
      overrides=lambda base, s: {**ablation.loss_overrides(base, "fastap"), "sampler": s},
      name=lambda c: c.sampler, column="sampler", point=lambda c: (c.sampler, None),
      xlabel="sampler (super_class: hard, m_per_class: random classes)",
  )


if __name__ == "__main__":
  main()
