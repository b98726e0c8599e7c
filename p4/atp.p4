/*
 * atp.p4 -- ATP (Lao et al., NSDI'21) in-network aggregation for bmv2's v1model (simple_switch).
 *
 * Jobs share one pool of ATP_POOL_SIZE aggregators: the first packet of a sequence claims
 * the one it names, a packet that finds it taken goes to its job's parameter server (PS)
 * tagged, a complete or flushed sum goes to the PS, and the PS's result frees the aggregator
 * and is multicast to the job's workers. Everything else is forwarded as an L2 switch.
 * docs/dataplane-atp.md is the specification, shared with the embedded pipeline
 * (switches/embedded/atp/) control by control; p4/README.md says how to build it.
 *
 * Build: python p4/atp/gen_elements.py --k K --out DIR/include   (only for k != 32)
 *        p4c --target bmv2 --arch v1model [-I DIR/include] -I p4/atp/include -DATP_K=K
 *            [-DATP_POOL_SIZE=<aggregators>] -o DIR p4/atp.p4
 */
#include <core.p4>
#include <v1model.p4>

#include "constants.p4"
#include "headers.p4"
#include "parser.p4"
#include "checksum.p4"
#include "ingress.p4"
#include "egress.p4"

V1Switch(ATPParser(),
         ATPVerifyChecksum(),
         ATPIngress(),
         ATPEgress(),
         ATPComputeChecksum(),
         ATPDeparser()) main;
