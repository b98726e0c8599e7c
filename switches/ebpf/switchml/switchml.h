/*
 * switchml.h -- what the eBPF data plane (switchml.bpf.c) and its control plane
 * (control.py, maps.py) share: action numbers of the tables, and the limits of the maps
 * that have no P4 counterpart and are SwitchML's own (those every program of the target
 * shares are in ../tc_switch.h). Plain "#define NAME number" lines only: maps.py reads them
 * with protocol.params.read_p4_constants, as the Python side reads constants.p4.
 *
 * Every table's action 0 is its P4 default action, so the one-cell <table>_default
 * maps, which the kernel creates zeroed, start with the P4 program's default_action.
 * The tables' sizes (max_entries) are the P4 program's, SWITCHML_*_TABLE_SIZE in
 * constants.p4.
 */
#ifndef SWITCHML_EBPF_H
#define SWITCHML_EBPF_H

/* SwitchMLIngress.worker_table */
#define WORKER_TABLE_DROP_UNKNOWN_SENDER 0
#define WORKER_TABLE_SET_WORKER 1
#define WORKER_TABLE_FORWARD_AS_ORDINARY 2

/* SwitchMLIngress.uplink_table */
#define UPLINK_TABLE_NOACTION 0
#define UPLINK_TABLE_SET_UPLINK 1

/* SwitchMLIngress.l2_learn_table */
#define L2_LEARN_TABLE_L2_LEARN 0
#define L2_LEARN_TABLE_NOACTION 1

/* SwitchMLIngress.l2_table */
#define L2_TABLE_L2_FLOOD 0
#define L2_TABLE_L2_FORWARD 1

/* SwitchMLIngress.switch_addr_table */
#define SWITCH_ADDR_TABLE_NOACTION 0
#define SWITCH_ADDR_TABLE_SET_SWITCH_MAC 1

/* SwitchMLEgress.rank_addr_table */
#define RANK_ADDR_TABLE_DROP 0
#define RANK_ADDR_TABLE_SET_RANK_ADDR 1

#endif
