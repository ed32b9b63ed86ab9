"""Block swap: the frozen weights of the model's blocks that do not fit the device live in host memory
(pinned, copied there once, host to device only: a frozen weight never needs copying back) and are
copied into a ring of device slots a few blocks ahead of the compute, on a CUDA stream of their own,
ordered by events: through the forward, through the recomputation that gradient checkpointing runs in
the backward (in reverse order), and through every no-grad forward (evaluation, samples).

The blocks (model/blocks.py) are the ones checkpointing recomputes. ComfyUI loads everything else;
the blocks' weights stay where ComfyUI keeps them between uses (comfy_compat.load_leaving_out), and
this places them: `held` blocks whole on the device, the others through the ring. Each block's
forward is wrapped (under the checkpointing wrapper, so the recomputation passes through it too);
the wrapper makes the block resident, then starts copying the next blocks the computation will
need: in the backward the preceding ones, at the end of a training forward the last ones again (the
backward starts there), at the end of a no-grad forward the first ones. A block whose weights are
overwritten by another has its weights' version bumped, so an autograd graph that still held them
raises instead of computing with the wrong weights; a block out of the ring has its weights pointing
at the host copy, so any use that bypasses its forward fails on the device instead of computing
with stale values. The weights' values never change, so a run trains exactly as with every block
resident (tests/training/memory/test_block_swap.py checks it bit for bit on the CPU).

When the steps replay from CUDA graphs (`graphed`), each graph must hold every copy its replay needs:
its slots' contents must not depend on what ran before it. So every region of computation (a
training forward, a backward, a no-grad forward: each graph captures one) starts with the ring empty,
copies only blocks of its own region ahead, and ends with the copying stream joined back to the
compute (at the model's forward's end; in the backward, as autograd finishes). A replay then makes
exactly the copies its capture made, into the same slots, reading the host copies as they are.
"""

import logging
from collections.abc import Iterable

import comfy.patcher_extension
import torch
from torch.autograd.graph import increment_version

from ...comfy_compat import load_leaving_out
from ..adapters.forward_swap import SwappedForward, swap_in, swap_out
from ..model.blocks import model_blocks
from .placed_block import PlacedBlock, swappable_modules

INJECTION_KEY = "eridiffusion_block_swap"
SLOTS = 2  # the ring: the block computing and the next one arriving


class BlockSwap:
    """The placement of a model's blocks. `ring`: the positions (in model_blocks order) whose weights
    pass through the device slots; the other blocks are held on the device whole. `on_settle`
    (optional): called once, by `settle` after the first optimizer step, to change the ring
    (swap_plan.py's budget, from the first step's peak memory)."""

    graphed = False  # CUDA graphs capture the steps: every region starts with the ring empty, ends joined

    def __init__(self, patcher, ring: Iterable[int], device, trained_ids=frozenset(), on_settle=None):
        diffusion_model = patcher.model.diffusion_model
        names = {id(m): "diffusion_model." + n for n, m in diffusion_model.named_modules()}
        self.device = torch.device(device)
        self.blocks = [
            PlacedBlock(i, block, swappable_modules(block, patcher.patches, names, trained_ids))
            for i, block in enumerate(model_blocks(diffusion_model))
        ]
        self.ring = set(ring)
        self.on_settle = on_settle
        self.slots: list[torch.Tensor] = []
        self.occupant: list[PlacedBlock | None] = []
        self.ready: list[torch.cuda.Event | None] = []
        self.free_after: list[torch.cuda.Event | None] = []
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.last: PlacedBlock | None = None
        self.last_in_backward = self.settled = False
        self.region: tuple | None = None  # (in_backward, training, capturing) of the region running
        self.region_copies = 0  # copies queued on the copying stream since the region began
        self.hook = None  # the diffusion model's forward hook (the end of a forward region)
        self.bytes_copied = 0  # host to device since the engine was made
        self.forwards = 0  # training forwards begun (a micro-batch's each)
        self.settled_at = (0, 0)  # (forwards, bytes_copied) when the plan settled
        self.restore: list[tuple[dict, str, torch.Tensor]] = []  # buffers moved to the device
        self.bound: dict[int, tuple[torch.nn.Parameter, torch.Tensor]] = {}  # id: (param, its tensor before)

    # -- what the plan reads --------------------------------------------------------------------

    def block_bytes(self):
        """Bytes of each block's placed weights, in model_blocks order."""
        return [b.nbytes for b in self.blocks]

    def computed_over(self):
        """The positions each block computed over in the first step (model_blocks order), or None where
        one did not run: its compute is about that many times its weights' bytes."""
        seen = [b.computed_over for b in self.blocks]
        return None if not all(seen) else seen

    def resident_bytes(self):
        """Device bytes of block weights the placement holds: the held blocks and the ring's slots."""
        held = sum(b.nbytes for b in self.blocks if b.position not in self.ring)
        return held + len(self.slots) * self._slot_bytes()

    def _slot_bytes(self):
        return max((b.nbytes for b in self.blocks if b.position in self.ring), default=0)

    # -- patching -------------------------------------------------------------------------------

    def install(self, patcher):
        """Register on the training clone `patcher`: ComfyUI leaves the blocks' weights alone when it
        loads, and they are placed here whenever it patches the clone."""
        load_leaving_out(patcher, [m for b in self.blocks for m in b.modules])
        patcher.set_injections(INJECTION_KEY, [comfy.patcher_extension.PatcherInjection(self._inject, self._eject)])

    def _inject(self, model_patcher):
        """Place the blocks, and move every buffer ComfyUI's partial loading leaves on the CPU (those of
        modules without weights: model_sampling's sigmas, which the step would otherwise compute its
        timestep with on the CPU, a sync and a copy no CUDA graph can hold) to the device."""
        with torch.inference_mode(False), torch.no_grad():
            for module in model_patcher.model.modules():
                for name, buffer in module._buffers.items():
                    if buffer is not None and buffer.device != self.device:
                        self.restore.append((module._buffers, name, buffer))
                        module._buffers[name] = buffer.to(self.device)
            self._place()
        for block in self.blocks:
            swap_in(block.module, _SwapForward, self, block)
        self.hook = model_patcher.model.diffusion_model.register_forward_hook(self._forward_done)

    def _eject(self, model_patcher):
        """Unwrap the blocks and give every tensor changed back what it held."""
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
        for block in self.blocks:
            swap_out(block.module, _SwapForward)
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
        for table, name, tensor in reversed(self.restore):
            table[name] = tensor
        self.restore.clear()
        with torch.inference_mode(False):
            for param, tensor in self.bound.values():
                param.data = tensor
        self.bound.clear()
        for block in self.blocks:
            block.slot = None
        self.occupant = [None] * len(self.slots)
        self.last = self.region = None

    def _bind(self, block, views):
        for param, view in zip(block.parameters(), views):
            if id(param) not in self.bound:
                self.bound[id(param)] = (param, param.data)
            param.data = view

    def _place(self):
        """Make what is missing (host copies of the ring's blocks, device copies of the held ones, the
        slots) and bind every block: held ones to their device copy, the ring's to their host copy."""
        for block in self.blocks:
            if block.position in self.ring:
                if block.host is None:
                    pinned = self.device.type == "cuda"
                    block.host = block.copy_into(torch.empty(block.nbytes, dtype=torch.uint8, pin_memory=pinned))
                block.device_copy = None
                block.views.pop("device", None)
                self._bind(block, block.views_of("host", block.host))
            else:
                if block.device_copy is None:
                    room = torch.empty(block.nbytes, dtype=torch.uint8, device=self.device)
                    block.device_copy = block.copy_into(room)
                    self.bytes_copied += block.nbytes
                self._bind(block, block.views_of("device", block.device_copy))
            block.slot = None
        size, wanted = self._slot_bytes(), SLOTS if self.ring else 0
        if len(self.slots) != wanted or (self.slots and self.slots[0].numel() < size):
            self.slots = [torch.empty(size, dtype=torch.uint8, device=self.device) for _ in range(wanted)]
            for block in self.blocks:
                block.views = {k: v for k, v in block.views.items() if k in ("host", "device")}
        self.occupant, self.ready = [None] * wanted, [None] * wanted
        self.free_after = [self._now() for _ in range(wanted)]  # (after whatever is queued: it may use them)

    def _now(self):
        """An event after the work queued on the compute stream so far (None on the CPU)."""
        if self.stream is None:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    # -- one block's turn -----------------------------------------------------------------------

    def before(self, block, training):
        """Make `block` resident on the compute stream and start copying the blocks due next
        (`training`: grad mode was on for its forward)."""
        in_backward = torch._C._current_graph_task_id() != -1
        if training:
            if not in_backward and (self.last_in_backward or self.forwards == 0):
                self.forwards += 1
            self.last_in_backward = in_backward
        if self.graphed and self._region_begins(block.position, in_backward, training):
            self._empty_ring(in_backward)
        if self.last is not None and self.last.slot is not None:
            self.free_after[self.last.slot] = self._now()  # its compute is queued: the slot frees after it
        if block.position in self.ring:
            if block.slot is None:
                self._fetch(block, keep=())
            ready = self.ready[block.slot]
            if ready is not None:
                torch.cuda.current_stream(self.device).wait_event(ready)
        due = self._due(block.position, in_backward, training)
        for position in due:
            target = self.blocks[position]
            if target.slot is None:
                self._fetch(target, keep=(block.position, *due))
        self.last = block

    # -- regions (graphed) ----------------------------------------------------------------------

    def _region_begins(self, position, in_backward, training):
        """Whether `position`'s turn begins a region: another kind of computation than the last turn's
        (backward or forward, training or not, captured or not), or a turn out of its region's order."""
        capturing = self.stream is not None and torch.cuda.is_current_stream_capturing()
        kind = (in_backward, training, capturing)
        if kind != self.region or self.last is None:
            self.region = kind
            return True
        return position >= self.last.position if in_backward else position <= self.last.position

    def _empty_ring(self, in_backward):
        """Start a region with every slot free once the compute queued so far is done (events of this
        region only: a capture cannot wait on one recorded outside it); a backward's region ends joined."""
        if self.stream is not None and not torch.cuda.is_current_stream_capturing():
            torch.cuda.current_stream(self.device).wait_stream(self.stream)  # (nothing may stay queued)
        for slot, block in enumerate(self.occupant):
            if block is not None:
                self._evict(block)
                self.occupant[slot] = None
        self.ready = [None] * len(self.slots)
        self.free_after = [self._now() for _ in self.slots]
        self.last, self.region_copies = None, 0
        if in_backward:
            torch.autograd.Variable._execution_engine.queue_callback(self._join)

    def _join(self):
        """End a region: the compute stream waits for every copy the region queued."""
        if self.stream is not None and self.region_copies:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.region_copies = 0

    def _forward_done(self, module, args, output):
        if self.graphed:
            self._join()

    def _due(self, position, in_backward, training):
        """The ring's blocks the computation needs next (at most SLOTS - 1), nearest first: in the
        backward the preceding blocks (then the next step's forward); at the end of a training forward
        the last blocks again (the backward recomputes from there); after a no-grad forward, the first.
        With graphed regions, only the blocks left in this region."""
        n = len(self.blocks)
        if in_backward:
            order = [*range(position - 1, -1, -1), *(() if self.graphed else range(n))]
        elif training:
            order = [*range(position + 1, n), *(() if self.graphed else range(n - 1, -1, -1))]
        else:
            order = [*range(position + 1, n), *(() if self.graphed else range(n))]
        due: list[int] = []
        for p in order:
            if p in self.ring and p != position and p not in due:
                due.append(p)
                if len(due) == SLOTS - 1:
                    break
        return due

    def _fetch(self, block, keep):
        """Copy `block` into a free slot, or one whose occupant is not among `keep` (positions), once the
        compute that used that occupant is done."""
        slot = next((s for s, o in enumerate(self.occupant) if o is None), None)
        if slot is None:
            slot = next(s for s, o in enumerate(self.occupant) if o is not None and o.position not in keep)
        evicted = self.occupant[slot]
        if evicted is not None:
            self._evict(evicted)
        assert block.host is not None
        target = self.slots[slot][: block.nbytes]
        if self.stream is None:
            target.copy_(block.host)
        else:
            with torch.cuda.stream(self.stream):
                free = self.free_after[slot]
                if free is not None:
                    self.stream.wait_event(free)
                target.copy_(block.host, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(self.stream)
                self.ready[slot] = ready
        self.bytes_copied += block.nbytes
        self.region_copies += 1
        self.occupant[slot], block.slot = block, slot
        self._bind(block, block.views_of(slot, self.slots[slot]))

    def _evict(self, block):
        """`block` out of its slot, its parameters back on its host copy."""
        for param in block.parameters():
            increment_version(param)  # an autograd graph still holding them raises, never computes wrong
        assert block.host is not None
        self._bind(block, block.views_of("host", block.host))
        block.slot = None

    def placed_parameters(self):
        """The parameters whose tensors the placement binds (their addresses change as blocks move)."""
        return [p for b in self.blocks for p in b.parameters()]

    def release(self):
        """Let go of the slots and the copies (the run is over; its clone is unloaded): a result MODEL
        that outlives the run must not keep them."""
        self.slots, self.occupant, self.ready, self.free_after = [], [], [], []
        for block in self.blocks:
            block.host = block.device_copy = None
            block.views.clear()
            block.slot = None

    # -- a new plan -----------------------------------------------------------------------------

    def measure(self):
        """At the first step's end, before anything it captured goes: the plan's measurement, if any."""
        measure = getattr(self.on_settle, "measure", None)
        if measure is not None and not self.settled:
            measure()

    def settle(self):
        """After the first optimizer step (the training loop calls it): the plan's ring from what that step
        measured, if there is a plan (anything captured from the old placement must be let go first)."""
        if self.settled:
            return
        self.settled = True
        if self.on_settle is not None:
            self.on_settle(self)
        self.settled_at = (self.forwards, self.bytes_copied)

    def set_ring(self, ring):
        """Move to another ring (positions): blocks leaving it are held on the device from now on."""
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.ring = set(ring)
        with torch.inference_mode(False), torch.no_grad():
            self._place()
        self.last = self.region = None
        logging.info(f"EriDiffusion: block swap: {self.describe()}")

    def figures(self):
        """What the run's summary tells of the placement: the ring, and the bytes copied from host to
        device per training forward since the plan settled."""
        forwards, copied = self.forwards - self.settled_at[0], self.bytes_copied - self.settled_at[1]
        return {
            "blocks": len(self.blocks),
            "blocks_in_ring": len(self.ring),
            "ring": sorted(self.ring),
            "block_weights_on_device_gib": round(self.resident_bytes() / 2**30, 3),
            "host_to_device_gib_per_forward": round(copied / max(forwards, 1) / 2**30, 6),
            **(getattr(self.on_settle, "settled", None) or {}),  # the budget's plan: what it measured
        }

    def describe(self):
        n, ring, gib = len(self.blocks), len(self.ring), 2**30
        in_host = sum(b.nbytes for b in self.blocks if b.position in self.ring)
        return (
            f"{ring} of {n} blocks through a ring of {len(self.slots)} device slots ({in_host / gib:.2f} GiB in "
            f"host memory), {n - ring} held on the device; {self.resident_bytes() / gib:.2f} GiB of block weights "
            "on the device"
        )


class _SwapForward(SwappedForward):
    def __init__(self, module, engine, block):
        super().__init__(module)
        self.engine, self.block = engine, block

    def __call__(self, *args, **kwargs):
        training = torch.is_grad_enabled()
        if not self.block.computed_over and not self.engine.settled:
            self.block.computed_over = _positions(args, kwargs)
        with torch.inference_mode(False), torch.no_grad():
            self.engine.before(self.block, training)
        return self.base(*args, **kwargs)


def _positions(args, kwargs):
    """The positions a block's input spans: its first tensor's elements over its channels (the second
    dimension of an image or video tensor, the last of a token sequence); 1 where no tensor is."""
    first = next((v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        return 1
    channels = first.shape[1] if first.dim() >= 4 else first.shape[-1]
    return max(1, first.numel() // max(1, channels))
