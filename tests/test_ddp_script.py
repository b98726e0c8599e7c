"""hosts/ddp_script.py's running of a user's script, without Mininet: how its end is read.

Needs the optional torch extra (hosts/ddp_script.py imports it): skipped where it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_torch

pytestmark = [pytest.mark.torch]


def script_ending_with(tmp_path: Path, ending: str) -> str:
    script = tmp_path / "train.py"
    script.write_text("import sys\n\n\ndef main():\n    print('trained')\n\n\nif __name__ == '__main__':\n"
                      f"    {ending}\n")
    return str(script)


@pytest.mark.parametrize("ending", ["sys.exit(main())", "sys.exit(0)", "sys.exit()", "main()", "raise SystemExit(0)"])
def test_a_script_that_exits_with_status_0_has_finished(tmp_path: Path, ending: str) -> None:
    require_torch()
    from hosts.ddp_script import run_script

    run_script(script_ending_with(tmp_path, ending))


@pytest.mark.parametrize(("ending", "said"), [("sys.exit(3)", r"sys.exit\(3\): exit status 3$"),
                                              ("sys.exit('diverged')", r"sys.exit\('diverged'\): exit status 1$")])
def test_a_script_that_exits_with_another_status_fails_naming_it(tmp_path: Path, ending: str, said: str) -> None:
    require_torch()
    from hosts.ddp_script import run_script

    script = script_ending_with(tmp_path, ending)
    with pytest.raises(RuntimeError, match=rf"^{script} called {said}"):
        run_script(script)


def test_the_backend_a_script_asks_for_becomes_the_methods_where_it_means_gloo() -> None:
    require_torch()
    from hosts.ddp_shapes import backend_for

    for asked in (None, "gloo", "GLOO", "cpu:gloo", "switchml", "nccl", "cpu:gloo,cuda:nccl"):
        assert backend_for(asked, "switchml", cuda=False) == "switchml", asked
    assert backend_for("mpi", "switchml", cuda=False) == "mpi"
    with pytest.raises(RuntimeError, match=r"^init_process_group\('nccl'\) on a host with CUDA: the testbed sums CPU tensors"):
        backend_for("nccl", "switchml", cuda=True)
    assert backend_for("gloo", "switchml", cuda=True) == "switchml"


def shaped_script(store_port: int, queue) -> None:
    """The tutorial's shapes in one process of a one-rank testbed (method testbed_gloo, no
    switch): mp.spawn, its own MASTER_ADDR/MASTER_PORT and init_method, NCCL asked for."""
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from hosts.ddp_shapes import Rendezvous, script_shapes
    from hosts.torch_backend import close_groups, register

    def no_switch(rank: int, size: int) -> None:
        raise AssertionError("testbed_gloo asked for a switch client")

    register(no_switch)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store_port))
    meet = Rendezvous(0, 1, "127.0.0.1", str(store_port))
    report: dict = {}

    def demo_basic(rank: int, world_size: int) -> None:  # the tutorial's, on the CPU
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "12355"
        dist.init_process_group("nccl", init_method="tcp://localhost:12355", rank=rank, world_size=world_size)
        report["spawned"] = (rank, world_size)
        report["backend"] = dist.get_backend()
        report["master"] = (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
        total = torch.ones(3)
        dist.all_reduce(total)
        report["sum"] = total.tolist()
        dist.destroy_process_group()

    def refusal(call) -> str:
        try:
            call()
        except RuntimeError as error:
            return str(error)
        return "accepted"

    with script_shapes("testbed_gloo", meet):
        mp.spawn(demo_basic, args=(1,), nprocs=1)
        report["nprocs"] = refusal(lambda: mp.spawn(demo_basic, args=(2,), nprocs=2))
        report["join"] = refusal(lambda: mp.start_processes(demo_basic, args=(1,), nprocs=1, join=False))
        report["rank"] = refusal(lambda: dist.init_process_group("gloo", rank=1, world_size=2))
    report["restored"] = dist.init_process_group.__name__ == "init_process_group" and mp.spawn.__module__ == "torch.multiprocessing.spawn"
    close_groups()
    queue.put((0, report))


def test_the_tutorials_mp_spawn_and_own_rendezvous_meet_the_testbeds() -> None:
    """Issue 40, point 6: PyTorch's DDP tutorial spawns its ranks and sets MASTER_ADDR
    localhost itself, which on the testbed's hosts would meet only the ranks of one host. Here
    the host runs its rank's process, the testbed's rendezvous replaces the script's, NCCL
    asked for on a CPU host gets the method's backend, and what cannot be served is refused
    in one line each."""
    require_torch()
    import multiprocessing as mp

    from tests.test_torch_hook import collect

    context = mp.get_context("spawn")
    queue = context.Queue()
    proc = context.Process(target=shaped_script, args=(48791, queue))
    proc.start()
    report = collect([proc], queue)[0]
    assert report["spawned"] == (0, 1) and report["backend"] == "testbed_gloo" and report["sum"] == [1.0] * 3
    assert report["master"] == ("127.0.0.1", "48791")
    assert report["nprocs"].startswith("torch.multiprocessing.spawn(nprocs=2) on the testbed's 1 ranks: each emulated host runs one rank")
    assert report["join"].startswith("torch.multiprocessing.spawn(join=False): the testbed runs this host's rank")
    assert report["rank"].startswith("init_process_group(rank=1, world_size=2) on the testbed's rank 0 of 1: each emulated host is one rank")
    assert report["restored"]


TUTORIAL = Path(__file__).parent / "data" / "ddp_tutorial_spawn.py"
BIND_PORT = 48801


def tutorial_rank(rank: int, switch_port: int, store_port: int, queue) -> None:
    """One host's rank of tests/data/ddp_tutorial_spawn.py, as hosts/ddp_script.py runs it,
    on the switchml backend over the fake switch."""
    import os
    import sys

    from hosts.ddp_script import run_script
    from hosts.ddp_shapes import Rendezvous, script_shapes
    from hosts.switchml import SwitchMLClient
    from hosts.torch_backend import GROUPS, close_groups, fallback_counts, register
    from tests.test_switchml_client import JOB, LOSSLESS

    def client(group_rank: int, size: int) -> SwitchMLClient:
        return SwitchMLClient(group_rank, size, JOB, "127.0.0.1", switch_port=switch_port, bind_ipv4="127.0.0.1",
                              bind_port=BIND_PORT + group_rank, k=32, pool_size=8, retransmit=LOSSLESS, job_deadline_s=600)

    register(client)
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store_port))
    sys.argv = [str(TUTORIAL)]
    with script_shapes("switchml", Rendezvous(rank, 2, "127.0.0.1", str(store_port))):
        run_script(str(TUTORIAL))
    queue.put((rank, {"calls": GROUPS[0].records.calls, "fallbacks": dict(fallback_counts(GROUPS))}))
    close_groups()


def test_gradscaler_skips_an_overflowed_step_on_every_rank_through_the_switch() -> None:
    """Issue 44, point 5, as mixed precision meets it: rank 0's loss overflows at one step;
    DDP's bucket holding its inf and NaN gradients reaches every rank as the IEEE sum (Gloo's),
    so every rank's GradScaler skips the step and halves its scale, and the parameters stay
    equal (the script raises otherwise); the other steps' buckets cross the switch."""
    require_torch()
    from tests.test_torch_hook import run_ranks

    reports = run_ranks(tutorial_rank, 2, 32, BIND_PORT)
    for rank in range(2):
        assert reports[rank]["fallbacks"]["allreduce torch.float32 SUM the switch cannot carry (Gloo's IEEE sum)"] == 1
        assert reports[rank]["calls"] >= 3, "the other steps' buckets went through the switch"
