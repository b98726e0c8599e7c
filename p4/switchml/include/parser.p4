/*
 * parser.p4 -- SwitchMLParser and SwitchMLDeparser.
 *
 * Parse graph (docs/dataplane.md, SwitchMLParser):
 *   ethernet -> (etherType 0x0800) ipv4 -> (ihl 5, protocol 17) udp
 *            -> (dstPort &&& SWITCHML_UDP_PORT_MASK == SWITCHML_UDP_PORT_BASE) switchml -> data
 *   ethernet -> (etherType 0x0806) arp;  ipv4 -> (ihl 5, protocol 1) icmp
 * (ARP and ICMP for the switch's own address, which SwitchMLIngress answers.)
 * Anything else is accepted with the headers parsed so far, so the same program forwards
 * ordinary traffic (the baselines). A packet on an aggregation port that is too short for
 * switchml_h + SWITCHML_K elements fails its extract: v1model still runs ingress, with
 * standard_metadata.parser_error set, and SwitchMLIngress drops it as malformed.
 */
#ifndef SWITCHML_PARSER_P4
#define SWITCHML_PARSER_P4

#include "headers.p4"

parser SwitchMLParser(packet_in packet,
                      out headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            SWITCHML_ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* Only option-less IPv4 carries SwitchML: the UDP header must start at byte 34. */
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, 8w17): parse_udp;
            (4w5, SWITCHML_IPPROTO_ICMP): parse_icmp;
            default: accept;
        }
    }

    state parse_arp {
        packet.extract(hdr.arp);
        transition accept;
    }

    state parse_icmp {
        packet.extract(hdr.icmp);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            SWITCHML_UDP_PORT_BASE &&& SWITCHML_UDP_PORT_MASK: parse_switchml;
            default: accept;
        }
    }

    state parse_switchml {
        packet.extract(hdr.switchml);
        /* Exactly SWITCHML_K elements in one extract; fewer bytes -> PacketTooShort. */
        packet.extract(hdr.data);
        transition accept;
    }
}

control SwitchMLDeparser(packet_out packet, in headers_t hdr) {
    apply {
        /* emit skips invalid headers, so ordinary traffic leaves as it came in. */
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.icmp);
        packet.emit(hdr.udp);
        packet.emit(hdr.switchml);
        packet.emit(hdr.data);
    }
}

#endif
