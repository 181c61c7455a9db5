package sandboxclient

import (
	"k8s.io/client-go/rest"

	"github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned"
	sandboxtyped "github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned/typed/api/v1alpha1"
)

// Client performs client operations on the three kinds. It is safe for
// concurrent use.
type Client struct {
	cs versioned.Interface
}

// New returns a Client over a typed clientset.
func New(cs versioned.Interface) *Client { return &Client{cs: cs} }

// NewForConfig returns a Client for a REST config, such as one loaded from a
// kubeconfig with k8s.io/client-go/tools/clientcmd.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	cs, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(cs), nil
}

// Clientset is the typed clientset underneath, for what this package does not
// wrap (list, server-side apply, informers).
func (c *Client) Clientset() versioned.Interface { return c.cs }

func (c *Client) sandboxes(namespace string) sandboxtyped.SandboxInterface {
	return c.cs.SandboxV1alpha1().Sandboxes(namespace)
}

func (c *Client) snapshots(namespace string) sandboxtyped.SandboxSnapshotInterface {
	return c.cs.SandboxV1alpha1().SandboxSnapshots(namespace)
}

func (c *Client) forks(namespace string) sandboxtyped.SandboxForkInterface {
	return c.cs.SandboxV1alpha1().SandboxForks(namespace)
}
