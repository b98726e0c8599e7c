/*
 * switchml.p4 -- SwitchML in-network aggregation for bmv2's v1model (simple_switch).
 *
 * One switch sums the int32 vectors of up to SWITCHML_MAX_WORKERS workers, k =
 * SWITCHML_K elements per packet, in a pool of SWITCHML_MAX_POOL_SIZE slots with two
 * shadow sets each, and forwards everything else as an L2 switch. docs/dataplane.md is
 * the specification (shared with the embedded software switch); p4/README.md walks
 * through the packet paths.
 *
 * Build: p4c --target bmv2 --arch v1model -I p4/switchml/include -o build/p4 p4/switchml.p4
 *        [-DSWITCHML_MAX_POOL_SIZE=<slots>]
 */
#include <core.p4>
#include <v1model.p4>

#include "constants.p4"
#include "headers.p4"
#include "parser.p4"
#include "checksum.p4"
#include "ingress.p4"
#include "egress.p4"

V1Switch(SwitchMLParser(),
         SwitchMLVerifyChecksum(),
         SwitchMLIngress(),
         SwitchMLEgress(),
         SwitchMLComputeChecksum(),
         SwitchMLDeparser()) main;
