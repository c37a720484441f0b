"""A transcription, in torch, of the released similarity mixup of Patel et al. 2022, for the tests.

Transcribed from github.com/yash0307/RecallatK_surrogate at commit
ed052029d258555df2f94dd82d6f7df60ef7cc6f, src/mixup.py `pos_mixup` (called in src/main.py
`train_one_epoch` on the batch's embeddings when `--mixup 1`, before the RS@k loss of every row).
The released function is written out case by case for 3, 4 and 6 samples per class; here each
case's list of pairs is a table, in the released order, and `np.random.rand()` is replaced by the
next of the given weights (`alphas`), drawn in the released order. Checked by hand against the
file.
"""

from __future__ import annotations

import torch

# The pairs (offsets in a class's block) of `pos_mixup`, fake_1, fake_2, ... in order.
PAIRS = {
  6: [
    (0, 1),
    (1, 2),
    (2, 3),
    (3, 4),
    (4, 5),
    (0, 2),
    (0, 3),
    (0, 4),
    (0, 5),
    (1, 3),
    (1, 4),
    (1, 5),
    (2, 4),
    (2, 5),
    (3, 5),
  ],
  4: [(0, 1), (1, 2), (2, 3), (0, 3), (0, 2), (1, 3)],
  3: [(0, 1), (1, 2), (0, 2)],
}


def pos_mixup(tensor, num_id, alphas):
  """The batch with each class's fakes inserted after its block: `[num_id (m + P), D]`."""
  alphas = iter(alphas)
  batch_size = tensor.shape[0]
  num_pos = int(batch_size / num_id)
  fakes = []
  for i in range(0, batch_size, num_pos):
    for a, b in PAIRS[num_pos]:
      alpha = next(alphas)
      fakes.append(torch.unsqueeze(alpha * tensor[i + a, :] + (1.0 - alpha) * tensor[i + b, :], 0))
  tensor_fake = torch.cat(fakes, dim=0)
  num_fakes = len(PAIRS[num_pos])
  ind = num_pos
  for i in range(0, tensor_fake.shape[0], num_fakes):
    tensor = torch.cat((tensor[:ind, :], tensor_fake[i : i + num_fakes, :], tensor[ind:, :]), dim=0)
    ind += num_pos + num_fakes
  return tensor
