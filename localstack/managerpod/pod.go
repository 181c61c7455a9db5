package managerpod

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// expand replaces each $(NAME) in s by vars[NAME], as the kubelet expands a
// container's command, args and env values: $$ is a literal $, and a
// reference to an undefined variable, or one left open, stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '(':
			name, _, closed := strings.Cut(s[i+2:], ")")
			v, defined := vars[name]
			if !closed || !defined {
				b.WriteString("$(")
				i++
				continue
			}
			b.WriteString(v)
			i += 2 + len(name)
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// flagName returns the name of a "-name" or "--name[=value]" argument, ""
// for anything else.
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
	return name
}

// flagValue returns the value of the last --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range slices.Backward(args) {
		if flagName(a) == name {
			_, v, ok := strings.Cut(a, "=")
			return v, ok
		}
	}
	return "", false
}

// setFlags returns args with the value of each flag named in set replaced
// where it stands, and those args do not name appended in set's key order.
// Only the --name=value form can be rewritten: for "--name value" it cannot
// tell a value from the next argument without the binary's flag types.
func setFlags(args []string, set map[string]string) ([]string, error) {
	out := make([]string, 0, len(args)+len(set))
	seen := map[string]bool{}
	for _, a := range args {
		name := flagName(a)
		v, ok := set[name]
		if !ok {
			out = append(out, a)
			continue
		}
		if !strings.Contains(a, "=") {
			return nil, fmt.Errorf("argument %q: write it as --%s=value to run it locally", a, name)
		}
		out = append(out, "--"+name+"="+v)
		seen[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if !seen[name] {
			out = append(out, "--"+name+"="+set[name])
		}
	}
	return out, nil
}

// secretFile returns the Secret and key the kubelet would show at file in
// container c of pod: the file lies under the deepest of c's volume mounts
// that holds it, of a Secret volume that projects the key there.
func secretFile(pod corev1.PodSpec, c corev1.Container, file string) (secret, key string, err error) {
	file = path.Clean(file)
	var mount *corev1.VolumeMount
	var rel string
	for i, m := range c.VolumeMounts {
		r, ok := strings.CutPrefix(file, path.Clean(m.MountPath))
		if ok && (r == "" || strings.HasPrefix(r, "/")) && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount, rel = &c.VolumeMounts[i], r
		}
	}
	if mount == nil {
		return "", "", fmt.Errorf("%s is on no volume mount of container %s", file, c.Name)
	}
	within := path.Clean(path.Join(mount.SubPath, strings.TrimPrefix(rel, "/")))
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 || pod.Volumes[i].Secret == nil {
		return "", "", fmt.Errorf("%s is mounted from volume %q, which is not a Secret volume of the pod", file, mount.Name)
	}
	v := pod.Volumes[i].Secret
	switch {
	case within == ".":
		return "", "", fmt.Errorf("%s is the mount of volume %q itself, not a file in it", file, mount.Name)
	case len(v.Items) == 0 && !strings.Contains(within, "/"):
		return v.SecretName, within, nil
	}
	for _, it := range v.Items {
		if path.Clean(it.Path) == within {
			return v.SecretName, it.Key, nil
		}
	}
	return "", "", fmt.Errorf("%s: volume %q shows no key of Secret %s at %s", file, mount.Name, v.SecretName, within)
}
