//! The key every per-client limit counts by: what one client can easily hold many of is one key.
//!
//! An IPv6 host is usually given a whole /64 (SLAAC, privacy addresses, a /64 per customer), so keying IPv6 by
//! the full address would let one host appear as 2^64 peers and step around any per-peer limit. IPv4 addresses
//! are scarce enough to key as they are; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket
//! reports for an IPv4 client) is that IPv4 address.

use std::net::{IpAddr, Ipv6Addr};

/// Bits of an IPv6 address that name its network: the /64 one host is usually given.
const IPV6_PREFIX_BITS: u32 = 64;

/// The key a per-peer limit counts `ip` under: IPv4 as is, an IPv4-mapped IPv6 address as its IPv4 address, any
/// other IPv6 address as its /64 (the host bits zeroed).
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let network_mask = u128::MAX << (128 - IPV6_PREFIX_BITS);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & network_mask))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> String {
        peer_key(text.parse().expect("an address")).to_string()
    }

    #[test]
    fn ipv4_is_kept_mapped_ipv4_is_unmapped_and_ipv6_is_its_64() {
        assert_eq!(key("203.0.113.7"), "203.0.113.7");
        assert_eq!(key("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"), "another /64 is another peer");
        assert_eq!(key("::1"), "::");
    }
}
