"""A layer's weight change as a low-rank product and its singular values: the math resize, merge and
extract share. Kept energy is the Frobenius share ‖ΔW_r‖_F / ‖ΔW‖_F (not squared), as kohya's
resize_lora reports it."""

from dataclasses import dataclass

import torch

from ..errors import EriDiffusionError


@dataclass
class LowRank:
    """ΔW = up @ down (both 2-D) shaped as `shape`: a conv's kernel lives in `down`'s columns, as in
    ComfyUI's LoRA (down: rank x in·kh·kw, up: out x rank)."""

    up: torch.Tensor
    down: torch.Tensor
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return self.down.shape[0]

    def delta(self) -> torch.Tensor:
        return (self.up @ self.down).reshape(self.shape)


@dataclass
class Spectrum:
    """ΔW = U diag(S) Vh, singular values descending."""

    u: torch.Tensor
    s: torch.Tensor
    vh: torch.Tensor
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """How many singular values: the most rank ΔW can have (a LoRA's rank may exceed its layer's)."""
        return len(self.s)

    def kept_energy(self, rank: int) -> float:
        """‖ΔW_rank‖_F / ‖ΔW‖_F; a zero ΔW keeps all of it."""
        total = self.s.square().sum()
        if total == 0:
            return 1.0
        return float((self.s[:rank].square().sum() / total).sqrt())

    def rank_for(self, energy: float) -> int:
        """The smallest rank whose kept energy reaches `energy`."""
        total = self.s.square().sum()
        if total == 0:
            return 1
        shares = (self.s.square().cumsum(0) / total).sqrt()
        return min(int((shares < energy - 1e-7).sum()) + 1, len(self.s))

    def truncated(self, rank: int, scale: float) -> LowRank:
        """The rank-`rank` part as LoRA factors (up, down) for a layer whose file scale alpha/rank is
        `scale`: the singular values split evenly between them, so fp16 holds both."""
        root = (self.s[:rank] / scale).sqrt()
        return LowRank(self.u[:, :rank] * root, root[:, None] * self.vh[:rank], self.shape)


def spectrum_of_product(low_rank: LowRank) -> Spectrum:
    """The SVD of up @ down through QR of each factor: an r x r SVD instead of one of out x in."""
    up, down = low_rank.up.double(), low_rank.down.double()
    q_up, r_up = torch.linalg.qr(up)
    q_down, r_down = torch.linalg.qr(down.T)
    u, s, vh = torch.linalg.svd(r_up @ r_down.T, full_matrices=False)
    return Spectrum((q_up @ u).float(), s.float(), (vh @ q_down.T).float(), low_rank.shape)


def spectrum_of_matrix(delta: torch.Tensor) -> Spectrum:
    """The SVD of a full weight change, a conv's kernel flattened into the columns (in fp32: a model's
    large layers take seconds each in fp64)."""
    u, s, vh = torch.linalg.svd(delta.reshape(delta.shape[0], -1).float(), full_matrices=False)
    return Spectrum(u.float(), s.float(), vh.float(), tuple(delta.shape))


def check_rank_and_energy(rank: int | None, energy: float | None, what: str) -> None:
    """Exactly one of a rank (1 or more) and an energy share in (0, 1]."""
    if (rank is None) == (energy is None):
        raise EriDiffusionError(f"{what}: give either a rank or an energy share, not {'both' if rank else 'neither'}.")
    if rank is not None and rank < 1:
        raise EriDiffusionError(f"{what}: rank {rank} is out of range; give a rank of 1 or more.")
    if energy is not None and not 0 < energy <= 1:
        raise EriDiffusionError(
            f"{what}: energy {energy} is out of range; give the share of each layer's weight change to keep, "
            "above 0 and at most 1 (e.g. 0.9)."
        )
