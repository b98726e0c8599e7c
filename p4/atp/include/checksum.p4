/*
 * checksum.p4 -- ATPVerifyChecksum and ATPComputeChecksum.
 *
 * Result copies leave with rewritten addresses and marked packets with a new diffserv, so
 * the IPv4 header checksum of every departing option-less IPv4 frame is recomputed (csum16
 * over the 20-byte header), as SwitchMLComputeChecksum does. The UDP checksum of ATP packets
 * is 0 on the wire and stays 0.
 */
#ifndef ATP_CHECKSUM_P4
#define ATP_CHECKSUM_P4

#include "headers.p4"

control ATPVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    /* Nothing to verify: the testbed's links do not corrupt packets. */
    apply { }
}

control ATPComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.diffserv,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

#endif
