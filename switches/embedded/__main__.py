"""``python -m switches.embedded --program MODULE:CLASS --port 1=s1-eth1 --port 2=s1-eth2 --control-socket PATH``.

``--program`` names the protocol's program class (program.py's ``PortProgram``; the target's
``PROGRAMS`` line for the protocol), which the process imports and runs on the ports."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from base.plugin import resolve
from protocol.packet import IPV4_MTU, max_elements
from switches.embedded.delay_line import DelayLine
from switches.embedded.switch import EmbeddedSwitch

log = logging.getLogger("switches.embedded")


def _port(text: str) -> tuple[int, str]:
    number, sep, ifname = text.partition("=")
    if not sep or not number.isdigit() or not ifname:
        raise argparse.ArgumentTypeError(f"expected PORT=INTERFACE, got {text!r}")
    return int(number), ifname


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m switches.embedded", description=__doc__)
    parser.add_argument("--port", type=_port, action="append", required=True, help="PORT=INTERFACE, repeatable")
    parser.add_argument("--program", required=True, help="module:attribute of the protocol's program class (PortProgram)")
    parser.add_argument("--control-socket", type=Path, required=True, help="Unix socket the control plane connects to")
    parser.add_argument("--log-file", type=Path, help="log here instead of stderr")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--seed", type=int, help="seed of the drop simulator's random draws")
    parser.add_argument("--k", type=int, required=True, help="elements per packet")
    parser.add_argument("--max-pool-size", type=int, required=True, help="the program's pool: the register cells its jobs share")
    parser.add_argument("--link-delay-ms", type=float, default=0.0,
                        help="propagation delay of each link; every frame is held twice this long (one link in, one out)")
    args = parser.parse_args(argv)
    ports = dict(args.port)
    if len(ports) != len(args.port):
        parser.error("a port number is given twice")
    if not 1 <= args.k <= max_elements(0):  # each protocol's header narrows it; its config checks its own k
        parser.error(f"--k must be within 1..{max_elements(0)} (a packet must fit the {IPV4_MTU}-byte MTU)")
    if args.link_delay_ms < 0:
        parser.error("--link-delay-ms must not be negative")
    if not 1 <= args.max_pool_size <= 0x10000:
        parser.error("--max-pool-size must be within 1..65536 (slot is bit<16>)")
    args.ports = ports
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        filename=args.log_file,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    delay_line = DelayLine(2 * args.link_delay_ms / 1000) if args.link_delay_ms > 0 else None
    program = resolve(args.program)(k=args.k, max_pool_size=args.max_pool_size, seed=args.seed)
    log.info("program %s: k=%d, pool=%d", args.program, args.k, args.max_pool_size)
    switch = EmbeddedSwitch(program, args.ports, args.control_socket, delay_line)
    try:
        switch.run()
    finally:
        switch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
