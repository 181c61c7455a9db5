// Command egress-broker is an example of the broker a Sandbox's network
// policy sends a provider's requests to with a forwardURL rule, as Junior
// does for api.github.com: the credential for the provider lives here and
// never in the sandbox.
//
// For each request the firewall forwards it verifies the signed token that
// names the calling sandbox (as @vercel/sandbox's defineSandboxProxy does),
// finds the Sandbox object whose Vercel sandbox that is, reads the
// conversation from its junior.sentry.io/conversation label, sets that
// conversation's credential for the destination host, and sends the request
// on to where the sandbox addressed it. See README.md for the flow and the
// Sandbox that uses it.
//
//	go run ./examples/egress-broker --public-origin https://broker.example.com \
//	  --tls-cert tls.crt --tls-key tls.key --team-id team_… --project-id prj_… \
//	  --namespace junior --credentials-file /var/run/secrets/broker/credentials.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// vercelIssuer is the only issuer defineSandboxProxy accepts.
const vercelIssuer = "https://oidc.vercel.com"

type flags struct {
	listen, tlsCert, tlsKey, publicOrigin string
	issuers                               stringList
	teamID, projectID, namespace          string
	credentialsFile, kubeconfig           string
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var f flags
	flag.StringVar(&f.listen, "listen", ":8443", "Address to serve HTTPS on.")
	flag.StringVar(&f.tlsCert, "tls-cert", "", "Certificate (PEM) for the public origin's host.")
	flag.StringVar(&f.tlsKey, "tls-key", "", "Private key (PEM) of --tls-cert.")
	flag.StringVar(&f.publicOrigin, "public-origin", "", "The origin forward URLs use to reach this broker, e.g. https://broker.example.com; tokens' aud must name it.")
	flag.Var(&f.issuers, "issuer", "Allowed token issuer (repeatable; default "+vercelIssuer+"). Its keys are fetched from <issuer>/.well-known/jwks.")
	flag.StringVar(&f.teamID, "team-id", "", "The Vercel team whose sandboxes may call (the operator's VERCEL_TEAM_ID).")
	flag.StringVar(&f.projectID, "project-id", "", "The Vercel project whose sandboxes may call (the operator's VERCEL_PROJECT_ID).")
	flag.StringVar(&f.namespace, "namespace", "default", "Namespace of the Sandboxes.")
	flag.StringVar(&f.credentialsFile, "credentials-file", "", "JSON file (a mounted Secret key): conversation → host → header → value.")
	flag.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Path to the kubeconfig (default $KUBECONFIG; in-cluster config when empty).")
	flag.Parse()
	if len(f.issuers) == 0 {
		f.issuers = stringList{vercelIssuer}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	if f.tlsCert == "" || f.tlsKey == "" || f.credentialsFile == "" {
		return errors.New("--tls-cert, --tls-key and --credentials-file are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	creds, err := loadStaticCredentials(f.credentialsFile)
	if err != nil {
		return fmt.Errorf("--credentials-file: %w", err)
	}
	sandboxes, err := newSandboxIndex(ctx, cfg, f.namespace)
	if err != nil {
		return fmt.Errorf("watch Sandboxes in %s: %w", f.namespace, err)
	}
	b, err := newBroker(options{PublicOrigin: f.publicOrigin, Issuers: f.issuers, TeamID: f.teamID, ProjectID: f.projectID,
		Sandboxes: sandboxes, Credentials: creds})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	log.Printf("Serving forwarded requests: listen=%s origin=%s namespace=%s", l.Addr(), f.publicOrigin, f.namespace)
	return serve(ctx, l, b, f.tlsCert, f.tlsKey)
}

// options configure a Broker; the test sets the transports.
type options struct {
	PublicOrigin      string
	Issuers           []string
	TeamID, ProjectID string
	Sandboxes         sandboxFinder
	Credentials       Credentials
	Upstream          http.RoundTripper // default newUpstreamTransport()
	JWKSClient        *http.Client      // default: a client with jose's 5 s timeout
	Logf              func(format string, args ...any)
	Now               func() time.Time
}

func newBroker(o options) (*Broker, error) {
	u, err := url.Parse(o.PublicOrigin)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("--public-origin %q: want https://host[:port] (forward URLs must be https)", o.PublicOrigin)
	}
	if o.TeamID == "" || o.ProjectID == "" {
		return nil, errors.New("--team-id and --project-id are required: without them any Vercel customer's sandbox could call")
	}
	for _, iss := range o.Issuers {
		if err := checkIssuer(iss); err != nil {
			return nil, err
		}
	}
	if o.Upstream == nil {
		o.Upstream = newUpstreamTransport()
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	return &Broker{
		origin: "https://" + strings.ToLower(u.Host), teamID: o.TeamID, projectID: o.ProjectID,
		verifier:  newVerifier(o.Issuers, o.JWKSClient, o.Now),
		sandboxes: o.Sandboxes, creds: o.Credentials, upstream: o.Upstream, logf: o.Logf,
	}, nil
}

// checkIssuer: keys are fetched over https, except from a loopback issuer
// (the emulator in `make dev`), where no network sits between the two.
func checkIssuer(iss string) error {
	u, err := url.Parse(iss)
	if err == nil && u.Host != "" && u.User == nil && u.RawQuery == "" {
		if u.Scheme == "https" {
			return nil
		}
		ip := net.ParseIP(u.Hostname())
		if u.Scheme == "http" && (u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())) {
			return nil
		}
	}
	return fmt.Errorf("--issuer %q: want an https URL (http only on loopback)", iss)
}

// serve serves HTTPS itself rather than plain HTTP behind an ingress: the
// token and the sandbox's request never cross a hop in clear, and the
// broker needs no X-Forwarded-* to know the URL the firewall used. (Behind
// a TLS-terminating ingress the same code works with --public-origin set to
// the ingress's origin, which is what aud is checked against.) No
// WriteTimeout: answers stream.
func serve(ctx context.Context, l net.Listener, h http.Handler, certFile, keyFile string) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(discardURLs{}, "", 0),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.ServeTLS(l, certFile, keyFile)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// discardURLs drops net/http's server messages: some quote request URLs,
// and a forward URL's path may carry a secret.
type discardURLs struct{}

func (discardURLs) Write(p []byte) (int, error) { return len(p), nil }
