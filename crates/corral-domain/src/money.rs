//! Exact money in fixed point, for pricing rates (checked in `capabilities`) and usage
//! estimates (`usage`).

/// Decimal places kept by [`Money`].
const SCALE_DIGITS: u32 = 12;
/// 10^[`SCALE_DIGITS`].
pub(crate) const SCALE: i128 = 1_000_000_000_000;
/// Most digits before the point a rate may have (a price of up to 999,999 per unit).
const MAX_INT_DIGITS: usize = 6;

/// An exact amount of money in fixed point: units of 10^-12 of a currency unit. Rates are
/// decimal figures; binary floating point would not add them up exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Money(i128);

impl Money {
    /// Parses a non-negative decimal (`"0.000014"`, `"5"`): at most 6 digits before the
    /// point and 12 after. `None` for anything else (signs, exponents, empty parts).
    pub fn parse(s: &str) -> Option<Money> {
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        if int.is_empty() || int.len() > MAX_INT_DIGITS || !int.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut value: i128 = int.parse().ok()?;
        value *= SCALE;
        if let Some(frac) = frac {
            if frac.is_empty()
                || frac.len() > SCALE_DIGITS as usize
                || !frac.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let digits: i128 = frac.parse().ok()?;
            // At most 12 fractional digits, so the exponent is at most 12.
            value += digits * 10_i128.pow(SCALE_DIGITS - frac.len() as u32);
        }
        Some(Money(value))
    }

    /// Adds `picos` units of 10^-12 (saturating).
    pub fn add_picos(&mut self, picos: i128) {
        self.0 = self.0.saturating_add(picos);
    }

    /// The amount in units of 10^-12.
    pub fn picos(self) -> i128 {
        self.0
    }

    /// A decimal string with the trailing zeros of the fraction dropped (`"0.0504"`, `"0"`).
    pub fn to_decimal(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let scale = SCALE.unsigned_abs();
        let (int, frac) = (abs / scale, abs % scale);
        if frac == 0 {
            return format!("{sign}{int}");
        }
        let frac = format!("{frac:012}");
        format!("{sign}{int}.{}", frac.trim_end_matches('0'))
    }
}
