/*
 * checksum.p4 -- SwitchMLVerifyChecksum and SwitchMLComputeChecksum.
 *
 * Results leave with rewritten IPv4 addresses, so the IPv4 header checksum is
 * recomputed (csum16 over the 20-byte header). It is restricted to ihl == 5 because the
 * parser does not extract IPv4 options: a checksum over the fixed part only would
 * corrupt a forwarded packet that has options. The UDP checksum of SwitchML packets is
 * 0 ("no checksum") on the wire and the switch keeps it 0 (see make_result in ingress.p4).
 */
#ifndef SWITCHML_CHECKSUM_P4
#define SWITCHML_CHECKSUM_P4

#include "headers.p4"

control SwitchMLVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    /* Nothing to verify: the testbed's links do not corrupt packets, and bmv2 would only
     * flag (not drop) a bad checksum. */
    apply { }
}

control SwitchMLComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
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
