//! Shapes of personal data that more than one free-text screen looks for.

/// The longest text form of an IPv6 address (eight groups with an IPv4 tail).
const IPV6_MAX_CHARS: usize = 45;

/// Whether `text` holds an IPv6 address anywhere: a span that parses as one,
/// with no letter or digit just before it and no hex digit just after it
/// (`fetch:2001:db8::1`, `host-fe80::1`, `at 2001:db8::1.`, `2001:db8::1x`),
/// and either a decimal digit in it or three groups or more.
///
/// The digit keeps two-word hex names (`dead::beef`, `a::b`, `abc::def`: path
/// and namespace separators) out; an address in use nearly always has one
/// (`2001:`, `fe80:`, `fd00:`, `::1`), and one of three groups or more is no
/// name (`dead:beef:cafe:babe:dead:beef:cafe:babe`). The bound before it keeps
/// a colon pair inside a word out (`step::12` is no address).
pub fn contains_ipv6(text: &str) -> bool {
    let bytes = text.as_bytes();
    let part = |b: u8| b.is_ascii_hexdigit() || b == b':' || b == b'.';
    let bounded = |at: usize| at >= bytes.len() || !bytes[at].is_ascii_hexdigit();
    (0..bytes.len()).any(|start| {
        let opens = part(bytes[start]) && (start == 0 || !bytes[start - 1].is_ascii_alphanumeric());
        opens && {
            let run = bytes[start..].iter().take(IPV6_MAX_CHARS).take_while(|b| part(**b)).count();
            (2..=run).any(|len| {
                let span = &bytes[start..start + len];
                let groups = || span.split(|b| *b == b':').filter(|group| !group.is_empty()).count();
                bounded(start + len)
                    && span.contains(&b':')
                    && (span.iter().any(u8::is_ascii_digit) || groups() >= 3)
                    // The span is ASCII: every byte in it passed `part`.
                    && std::str::from_utf8(span).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok())
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::contains_ipv6;

    #[test]
    fn an_address_is_found_wherever_it_stands() {
        let found = [
            "2001:db8::1",
            "fe80::1",
            "::1",
            "1::",
            "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
            "0::ffff:a00:1",
            "fetch:2001:db8::1",
            "host-fe80::1",
            "2001:db8::1-tool",
            "reach me at 2001:db8::1.",
            "a:b:c:d:e:f:1:2:3",
            "é2001:db8::1",
            "2001:db8::1x",
            "dead:beef:cafe:babe:dead:beef:cafe:babe",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "dead:beef::cafe",
        ];
        for text in found {
            assert!(contains_ipv6(text), "{text}");
        }
    }

    #[test]
    fn hex_words_and_separators_are_no_address() {
        let clear = [
            "abc::def",
            "dead::beef",
            "cafe::babe",
            "a::b",
            "fs::read",
            "crate::module",
            "std::vec::Vec",
            "a:b:c",
            "step::12",
            "tool:v1::2",
            "12:30",
            "at 12:30:45.5",
            "mcp.fs",
            "",
        ];
        for text in clear {
            assert!(!contains_ipv6(text), "{text}");
        }
    }
}
