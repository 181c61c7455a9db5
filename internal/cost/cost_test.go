package cost

import (
	"strings"
	"testing"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func dec(s string) *sandboxv1.Decimal { d := sandboxv1.Decimal(s); return &d }

func TestMoney(t *testing.T) {
	const hour = 3_600_000
	for _, tc := range []struct {
		name     string
		m        Metered
		p        *sandboxv1.SandboxPrices
		want     sandboxv1.Decimal
		currency string
	}{
		{"nothing costs nothing", Metered{}, nil, "0", "USD"},
		{"one active CPU hour at the list price", Metered{ActiveCPUMillis: hour}, nil, "0.128", "USD"},
		{"2 GB (2048 MB) provisioned for an hour", Metered{MemoryMBMillis: 2048 * hour}, nil, "0.0424", "USD"},
		{"one GB transferred", Metered{TransferBytes: 1_000_000_000}, nil, "0.15", "USD"},
		{"one million creations", Metered{Creations: 1_000_000}, nil, "0.6", "USD"},
		{"one creation is 0.6 millionths", Metered{Creations: 1}, nil, "0.000001", "USD"},
		{"10 GB of snapshots for 30 days", Metered{SnapshotByteSeconds: 10_000_000_000 * 30 * 24 * 3600}, nil, "0.8", "USD"},
		{"a class price replaces only its unit", Metered{ActiveCPUMillis: hour, TransferBytes: 2_000_000_000},
			&sandboxv1.SandboxPrices{Currency: "EUR", ActiveCPUHour: dec("0.1")}, "0.4", "EUR"},
		{"a session: 1 vCPU busy 30 min, 2 GB for an hour, 500 MB out, one start",
			Metered{ActiveCPUMillis: hour / 2, MemoryMBMillis: 2048 * hour, TransferBytes: 500_000_000, Creations: 1}, nil, "0.181401", "USD"},
		{"a million CPU hours stays exact", Metered{ActiveCPUMillis: 1_000_000 * hour}, nil, "128000", "USD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cur, err := Money(tc.m, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if Format(got) != tc.want || cur != tc.currency {
				t.Errorf("Money = %s %s, want %s %s", Format(got), cur, tc.want, tc.currency)
			}
		})
	}
}

func TestAmountInRawUnits(t *testing.T) {
	m := Metered{ActiveCPUMillis: 5_400_000, MemoryMBMillis: 1024 * 3_600_000 * 3, TransferBytes: 2_500_000_000, Creations: 7}
	for unit, want := range map[sandboxv1.BudgetUnit]sandboxv1.Decimal{
		sandboxv1.BudgetActiveCPUHours: "1.5", sandboxv1.BudgetMemoryGBHours: "3",
		sandboxv1.BudgetTransferGB: "2.5", sandboxv1.BudgetCreations: "7",
	} {
		got, err := Amount(unit, m, &sandboxv1.SandboxPrices{ActiveCPUHour: dec("99")})
		if err != nil {
			t.Fatal(err)
		}
		if Format(got) != want {
			t.Errorf("%s: got %s, want %s (prices must not change a raw unit)", unit, Format(got), want)
		}
	}
	if _, err := Amount("Bananas", m, nil); err == nil {
		t.Error("an unknown unit was accepted")
	}
}

func TestParseRefusesWhatIsNotADecimal(t *testing.T) {
	for _, s := range []sandboxv1.Decimal{"-1", "abc", "1e3x"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted it", s)
		}
	}
	if _, _, err := Money(Metered{}, &sandboxv1.SandboxPrices{TransferGB: dec("x")}); err == nil || err.Error() == "" {
		t.Error("a bad price was accepted")
	} else if want := "prices.transferGB"; !contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[string]sandboxv1.Decimal{"0": "0", "-3": "0", "1/3": "0.333333", "2/3": "0.666667", "5": "5", "1/8": "0.125"} {
		r, _ := Parse("0")
		r.SetString(in)
		if got := Format(r); got != want {
			t.Errorf("Format(%s) = %s, want %s", in, got, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
