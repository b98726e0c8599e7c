/*
 * parser.p4 -- ATPParser and ATPDeparser.
 *
 * Parse graph (docs/dataplane-atp.md, ATPParser):
 *   ethernet -> (etherType 0x0800) ipv4 -> (ihl 5, protocol 17) udp
 *            -> (dstPort &&& ATP_UDP_PORT_MASK == ATP_UDP_PORT_BASE) atp -> data
 * Anything else is accepted with the headers parsed so far: ordinary traffic, SwitchML's
 * ports included. A frame on an ATP port too short for atp_h + ATP_K values fails its
 * extract (v1model runs ingress with standard_metadata.parser_error set), and one longer
 * than an ATP frame is caught by its length in ATPIngress: both are malformed.
 */
#ifndef ATP_PARSER_P4
#define ATP_PARSER_P4

#include "headers.p4"

parser ATPParser(packet_in packet,
                 out headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* Only option-less IPv4 carries ATP: the UDP header must start at byte 34. */
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, 8w17): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            ATP_UDP_PORT_BASE &&& ATP_UDP_PORT_MASK: parse_atp;
            default: accept;
        }
    }

    state parse_atp {
        packet.extract(hdr.atp);
        /* Exactly ATP_K values in one extract; fewer bytes -> PacketTooShort. */
        packet.extract(hdr.data);
        transition accept;
    }
}

control ATPDeparser(packet_out packet, in headers_t hdr) {
    apply {
        /* emit skips invalid headers, so ordinary traffic leaves as it came in. */
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.atp);
        packet.emit(hdr.data);
    }
}

#endif
