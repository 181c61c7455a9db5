// Package cost turns metered sandbox usage into amounts: money at a price
// table (a SandboxClass's spec.prices over Vercel's list prices) or a raw
// unit a budget counts. Exact decimal arithmetic (math/big), never floats:
// budgets compare sums of many small amounts against a limit to the cent.
package cost

import (
	"fmt"
	"math/big"
	"strings"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Metered is what one object (or a namespace) used, in the units Vercel
// meters.
type Metered struct {
	// ActiveCPUMillis is CPU time the sessions' processes consumed.
	ActiveCPUMillis int64
	// MemoryMBMillis is provisioned memory × session time.
	MemoryMBMillis int64
	// TransferBytes is egress plus ingress.
	TransferBytes int64
	// Creations counts session starts (creates and resumes).
	Creations int64
	// SnapshotByteSeconds is snapshot storage held × time (seconds, so
	// that a terabyte held for a month still fits an int64).
	SnapshotByteSeconds int64
}

// Add is m + o.
func (m Metered) Add(o Metered) Metered {
	return Metered{m.ActiveCPUMillis + o.ActiveCPUMillis, m.MemoryMBMillis + o.MemoryMBMillis,
		m.TransferBytes + o.TransferBytes, m.Creations + o.Creations, m.SnapshotByteSeconds + o.SnapshotByteSeconds}
}

// FromUsage is the metered part of a status.usage amount (creations and
// storage are counted by whoever watches sessions and snapshots over time).
func FromUsage(a *sandboxv1.UsageAmounts) Metered {
	if a == nil {
		return Metered{}
	}
	return Metered{ActiveCPUMillis: a.ActiveCPUMillis, MemoryMBMillis: a.MemoryMBMillis, TransferBytes: a.EgressBytes + a.IngressBytes}
}

// The divisors from a metered unit to a priced one. GB of memory is 1024 MB
// (Vercel provisions "2 GB" as 2048 MB per vCPU); GB of transfer and storage
// is 10^9 bytes (Vercel's usage dashboard counts network and storage in
// decimal units); a storage month is 30 days.
var (
	millisPerHour       = big.NewRat(3_600_000, 1)
	mbMillisPerGBHour   = big.NewRat(1024*3_600_000, 1)
	bytesPerGB          = big.NewRat(1_000_000_000, 1)
	perMillion          = big.NewRat(1_000_000, 1)
	byteSecondsPerGBMon = new(big.Rat).SetInt(new(big.Int).Mul(big.NewInt(1_000_000_000), big.NewInt(30*24*3600)))
)

// Parse reads a Decimal ("0.128"); the API server already checked its form.
func Parse(d sandboxv1.Decimal) (*big.Rat, error) {
	if d == "" {
		return new(big.Rat), nil
	}
	r, ok := new(big.Rat).SetString(string(d))
	if !ok || r.Sign() < 0 {
		return nil, fmt.Errorf("%q is not a non-negative decimal number", string(d))
	}
	return r, nil
}

// Quantities are m in each raw budget unit.
func Quantities(m Metered) map[sandboxv1.BudgetUnit]*big.Rat {
	return map[sandboxv1.BudgetUnit]*big.Rat{
		sandboxv1.BudgetActiveCPUHours: quo(m.ActiveCPUMillis, millisPerHour),
		sandboxv1.BudgetMemoryGBHours:  quo(m.MemoryMBMillis, mbMillisPerGBHour),
		sandboxv1.BudgetTransferGB:     quo(m.TransferBytes, bytesPerGB),
		sandboxv1.BudgetCreations:      new(big.Rat).SetInt64(m.Creations),
	}
}

func quo(n int64, d *big.Rat) *big.Rat { return new(big.Rat).Quo(new(big.Rat).SetInt64(n), d) }

// Money is what m costs at prices p (unset prices are Vercel's list
// prices), in p's currency.
func Money(m Metered, p *sandboxv1.SandboxPrices) (*big.Rat, string, error) {
	full := p.WithDefaults()
	q := Quantities(m)
	sum := new(big.Rat)
	for _, t := range []struct {
		field string
		price *sandboxv1.Decimal
		qty   *big.Rat
	}{
		{"activeCPUHour", full.ActiveCPUHour, q[sandboxv1.BudgetActiveCPUHours]},
		{"memoryGBHour", full.MemoryGBHour, q[sandboxv1.BudgetMemoryGBHours]},
		{"transferGB", full.TransferGB, q[sandboxv1.BudgetTransferGB]},
		{"creationsPerMillion", full.CreationsPerMillion, new(big.Rat).Quo(q[sandboxv1.BudgetCreations], perMillion)},
		{"snapshotGBMonth", full.SnapshotGBMonth, quo(m.SnapshotByteSeconds, byteSecondsPerGBMon)},
	} {
		price, err := Parse(*t.price)
		if err != nil {
			return nil, "", fmt.Errorf("prices.%s: %w", t.field, err)
		}
		sum.Add(sum, new(big.Rat).Mul(price, t.qty))
	}
	return sum, full.Currency, nil
}

// Amount is m in unit: money at p, or the raw quantity.
func Amount(unit sandboxv1.BudgetUnit, m Metered, p *sandboxv1.SandboxPrices) (*big.Rat, error) {
	if unit == sandboxv1.BudgetMoney || unit == "" {
		r, _, err := Money(m, p)
		return r, err
	}
	r, ok := Quantities(m)[unit]
	if !ok {
		return nil, fmt.Errorf("unknown budget unit %q", unit)
	}
	return r, nil
}

// Places is the number of decimal places Format keeps: a millionth of a
// currency unit, well below what a bill shows, so sums of formatted amounts
// stay exact to the cent.
const Places = 6

// Format writes r as a Decimal with at most Places decimals (rounded half
// away from zero; negative amounts are 0), without trailing zeros.
func Format(r *big.Rat) sandboxv1.Decimal {
	if r == nil || r.Sign() <= 0 {
		return "0"
	}
	s := r.FloatString(Places)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return sandboxv1.Decimal(s)
}
