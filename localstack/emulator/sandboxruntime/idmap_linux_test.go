package sandboxruntime

import "testing"

func TestIDMappings(t *testing.T) {
	for _, own := range []int{0, 1000, 65534, 65535, 70000} {
		m := idMappings(own)
		covered := map[int]int{}
		for _, e := range m {
			for i := 0; i < e.Size; i++ {
				covered[e.ContainerID+i] = e.HostID + i
			}
		}
		if own > 0 && covered[SandboxUserID] != own {
			t.Errorf("own %d: the sandbox user %d maps to %d", own, SandboxUserID, covered[SandboxUserID])
		}
		if len(covered) != 1<<16 {
			t.Errorf("own %d: %d ids mapped, want 65536", own, len(covered))
		}
		hosts := map[int]bool{}
		for _, host := range covered {
			if hosts[host] {
				t.Errorf("own %d: host id %d mapped twice", own, host)
			}
			hosts[host] = true
		}
		if h, ok := covered[0]; ok && own != 0 && h != sandboxIDBase {
			t.Errorf("own %d: root maps to %d", own, h)
		}
		for in, host := range covered {
			if host == 0 {
				t.Errorf("own %d: %d maps to host root", own, in)
			}
		}
	}
}
