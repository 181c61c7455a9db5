package v1alpha1

// Decimal is an exact decimal number written as a string ("0.128", "20",
// "1500.50"): money is never a float in this API, so that prices and budgets
// add up to the cent. Up to 12 digits before and 12 after the point.
// +kubebuilder:validation:Pattern=`^[0-9]{1,12}(\.[0-9]{1,12})?$`
// +kubebuilder:validation:MaxLength=25
type Decimal string

// SandboxPrices is what Vercel charges for each metered unit of sandbox
// usage, in one currency. An unset price takes the manager's built-in
// default for that unit (DefaultPrices: Vercel's published list price).
type SandboxPrices struct {
	// currency of every price, an ISO 4217 code; USD when unset. Money
	// budgets add amounts of one currency: give every class the same one.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	Currency string `json:"currency,omitempty"`
	// activeCPUHour is the price of one hour of active CPU time (CPU time the
	// session's processes consumed, not wall time).
	// +optional
	ActiveCPUHour *Decimal `json:"activeCPUHour,omitempty"`
	// memoryGBHour is the price of one GB (1024 MB) of provisioned memory
	// for one hour of session time.
	// +optional
	MemoryGBHour *Decimal `json:"memoryGBHour,omitempty"`
	// transferGB is the price of one GB (10^9 bytes) of network transfer,
	// egress and ingress together.
	// +optional
	TransferGB *Decimal `json:"transferGB,omitempty"`
	// creationsPerMillion is the price of one million sandbox creations
	// (session starts: creates and resumes).
	// +optional
	CreationsPerMillion *Decimal `json:"creationsPerMillion,omitempty"`
	// snapshotGBMonth is the price of storing one GB (10^9 bytes) of
	// snapshots for one month (30 days).
	// +optional
	SnapshotGBMonth *Decimal `json:"snapshotGBMonth,omitempty"`
}

// DefaultCurrency is the currency of prices that name none.
const DefaultCurrency = "USD"

// DefaultPrices are Vercel's published Pro/Enterprise list prices of Vercel
// Sandbox, read on 2026-12-03 from https://vercel.com/docs/vercel-sandbox/pricing
// (page "Last updated November 26, 2025"): the prices of objects of no class,
// and of every unit a class leaves unset. docs/decisions/0005 says where
// each number comes from.
func DefaultPrices() SandboxPrices {
	d := func(s string) *Decimal { v := Decimal(s); return &v }
	return SandboxPrices{
		Currency:            DefaultCurrency,
		ActiveCPUHour:       d("0.128"),
		MemoryGBHour:        d("0.0212"),
		TransferGB:          d("0.15"),
		CreationsPerMillion: d("0.60"),
		SnapshotGBMonth:     d("0.08"),
	}
}

// WithDefaults is p with every unset price (and the currency) taken from
// DefaultPrices. A nil p is DefaultPrices.
func (p *SandboxPrices) WithDefaults() SandboxPrices {
	out := DefaultPrices()
	if p == nil {
		return out
	}
	if p.Currency != "" {
		out.Currency = p.Currency
	}
	for _, f := range []struct {
		dst **Decimal
		src *Decimal
	}{
		{&out.ActiveCPUHour, p.ActiveCPUHour}, {&out.MemoryGBHour, p.MemoryGBHour}, {&out.TransferGB, p.TransferGB},
		{&out.CreationsPerMillion, p.CreationsPerMillion}, {&out.SnapshotGBMonth, p.SnapshotGBMonth},
	} {
		if f.src != nil {
			v := *f.src
			*f.dst = &v
		}
	}
	return out
}
