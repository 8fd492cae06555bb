//! Linux CPU lists (`0-3,8-11`) and hexadecimal CPU masks (`0xFF`).
//!
//! Both forms are parsed without panicking on any input; every failure is a
//! human-readable reason that the caller wraps with the file or expression it
//! came from.

/// Highest CPU number (exclusive) this crate accepts anywhere: in sysfs lists,
/// mask expressions and pinning requests. Linux's `NR_CPUS` tops out at 8192
/// today; the limit only exists so that a corrupt list such as `0-4294967295`
/// cannot make us allocate gigabytes.
pub const CPU_LIMIT: usize = 1 << 20;

/// Parses a Linux CPU list such as `0-3,8-11` (as found in sysfs
/// `online`, `shared_cpu_list`, `cpulist`, …). Surrounding whitespace and a
/// trailing newline are ignored; an empty list is valid and yields no CPUs.
/// The result is ascending and free of duplicates.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err("empty element in CPU list".to_string());
        }
        let (first, last) = parse_range(part)?;
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Parses one element of a CPU list: `N` or `N-M` with `N <= M`.
pub fn parse_range(part: &str) -> Result<(usize, usize), String> {
    match part.split_once('-') {
        None => {
            let cpu = parse_cpu_number(part)?;
            Ok((cpu, cpu))
        }
        Some((a, b)) => {
            let first = parse_cpu_number(a.trim())?;
            let last = parse_cpu_number(b.trim())?;
            if first > last {
                return Err(format!("range `{part}` runs backwards"));
            }
            Ok((first, last))
        }
    }
}

fn parse_cpu_number(text: &str) -> Result<usize, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not a CPU number"));
    }
    match text.parse::<usize>() {
        Ok(n) if n < CPU_LIMIT => Ok(n),
        _ => Err(format!(
            "CPU number `{text}` is too large (limit {CPU_LIMIT})"
        )),
    }
}

/// Parses a hexadecimal CPU mask of any length: bit n set means CPU n, as in
/// published Windows affinity tables. Accepts an optional `0x`/`0X` prefix and
/// `_` or `,` digit separators (the latter as in sysfs `cpumap` files). The
/// result is ascending.
pub fn parse_hex_mask(text: &str) -> Result<Vec<usize>, String> {
    let text = text.trim();
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    let digits: Vec<u8> = digits
        .bytes()
        .filter(|b| *b != b'_' && *b != b',')
        .collect();
    if digits.is_empty() {
        return Err("hex mask has no digits".to_string());
    }
    let mut cpus = Vec::new();
    for (position, byte) in digits.iter().rev().enumerate() {
        let value = match (*byte as char).to_digit(16) {
            Some(v) => v,
            None => return Err(format!("`{}` is not a hex digit", *byte as char)),
        };
        for bit in 0..4 {
            if value & (1 << bit) != 0 {
                let cpu = position * 4 + bit;
                if cpu >= CPU_LIMIT {
                    return Err(format!(
                        "hex mask names CPU {cpu}, above the limit {CPU_LIMIT}"
                    ));
                }
                cpus.push(cpu);
            }
        }
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// Formats CPUs as a compact list for humans: runs of three or more become
/// ranges (`0-3,8,9`). Input need not be sorted.
pub fn format_compact(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        let piece = if j - i >= 2 {
            format!("{}-{}", sorted[i], sorted[j])
        } else if j > i {
            format!("{},{}", sorted[i], sorted[j])
        } else {
            sorted[i].to_string()
        };
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&piece);
        i = j + 1;
    }
    out
}

/// Formats CPUs as plain ascending comma-separated integers (`0,1,2,8`).
pub fn format_plain(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let strings: Vec<String> = sorted.iter().map(|c| c.to_string()).collect();
    strings.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_with_ranges_singles_and_newlines() {
        assert_eq!(
            parse_list("0-3,8-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 9, 10, 11]
        );
        assert_eq!(parse_list("5").unwrap(), vec![5]);
        assert_eq!(parse_list(" 2,0,1,1 \n").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_list("\n").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_list("").unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn bad_lists_are_errors_not_panics() {
        for bad in [
            "a",
            "1-",
            "-1",
            "3-1",
            "1,,2",
            "1-2-3",
            "0-99999999999999999999",
            "0x3",
            "1 2",
        ] {
            assert!(parse_list(bad).is_err(), "{bad:?} should fail");
        }
        let err = parse_list("0-2000000").unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn hex_masks_of_any_length() {
        assert_eq!(parse_hex_mask("0xFF").unwrap(), (0..8).collect::<Vec<_>>());
        assert_eq!(parse_hex_mask("0x5").unwrap(), vec![0, 2]);
        assert_eq!(parse_hex_mask("0XaA").unwrap(), vec![1, 3, 5, 7]);
        // 80 hex digits: bit 316 and bit 0, far beyond 64 bits.
        let mut long = String::from("0x8");
        long.push_str(&"0".repeat(78));
        long.push('1');
        assert_eq!(parse_hex_mask(&long).unwrap(), vec![0, 79 * 4 + 3]);
        assert_eq!(parse_hex_mask("0x1_0000_0000_0000_0000").unwrap(), vec![64]);
        assert_eq!(parse_hex_mask("00000000,00000003").unwrap(), vec![0, 1]);
        assert_eq!(parse_hex_mask("0x0").unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn bad_hex_masks() {
        assert!(parse_hex_mask("0x").unwrap_err().contains("no digits"));
        assert!(parse_hex_mask("0xFG").unwrap_err().contains("`G`"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_compact(&[0, 1]), "0,1");
        assert_eq!(format_compact(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10,11");
        assert_eq!(format_compact(&[3, 2, 1]), "1-3");
        assert_eq!(format_compact(&[]), "");
        assert_eq!(format_plain(&[8, 0, 1, 1]), "0,1,8");
    }
}
