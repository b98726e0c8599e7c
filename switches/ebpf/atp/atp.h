/*
 * atp.h -- what ATP's eBPF data plane (atp.bpf.c) and its control plane (maps.py,
 * control.py) share: the tables' action numbers (the limits of the maps every program of
 * the target shares are in ../tc_switch.h). Plain "#define NAME number" lines only: maps.py
 * reads them as the Python side reads constants.p4. ATP's own constants (port range, flags, counter cells, table
 * sizes) come from protocol/atp/params.py, written by compile.py into the build's
 * atp_params.h.
 *
 * Every table's action 0 is its default action (docs/dataplane-atp.md), so the one-cell
 * <table>_default maps, which the kernel creates zeroed, start with it.
 */
#ifndef ATP_EBPF_H
#define ATP_EBPF_H

/* ATPIngress.sender_table */
#define SENDER_TABLE_DROP_UNKNOWN_SENDER 0
#define SENDER_TABLE_SET_WORKER 1
#define SENDER_TABLE_SET_PS 2

/* ATPIngress.l2_table */
#define L2_TABLE_L2_FLOOD 0
#define L2_TABLE_L2_FORWARD 1

/* ATPEgress.worker_addr_table */
#define WORKER_ADDR_TABLE_DROP 0
#define WORKER_ADDR_TABLE_SET_WORKER_ADDR 1

#endif
