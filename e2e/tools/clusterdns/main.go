// Command clusterdns answers the e2e cluster's pods for the names of its
// Services: an A query for <service>.<namespace>.svc.<domain> gets the
// Service's cluster IP, or for a headless Service (CDI's upload Service is
// one) the addresses of its ready endpoints, read from the API server on
// each query. Every other
// name in the domain is NXDOMAIN and names outside it are REFUSED: the
// cluster's pods reach nothing off the node. It stands in for CoreDNS,
// which the cluster cannot pull.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/net/dns/dnsmessage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	listen := flag.String("listen", "10.244.0.1:53", "UDP address to answer on")
	domain := flag.String("domain", "cluster.local", "the cluster's DNS domain")
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *listen, *domain, *kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "clusterdns:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen, domain, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	conn, err := net.ListenPacket("udp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go func() { <-ctx.Done(); conn.Close() }()
	r := resolver{client: client, suffix: ".svc." + strings.Trim(domain, ".") + "."}
	buf := make([]byte, 1500)
	for {
		n, peer, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		reply, err := r.answer(ctx, buf[:n])
		if err != nil {
			slog.Warn("query dropped", "peer", peer, "err", err)
			continue
		}
		if _, err := conn.WriteTo(reply, peer); err != nil {
			slog.Warn("reply not sent", "peer", peer, "err", err)
		}
	}
}

type resolver struct {
	client kubernetes.Interface
	suffix string // ".svc.cluster.local."
}

func (r resolver) answer(ctx context.Context, query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	q, err := p.Question()
	if err != nil {
		return nil, fmt.Errorf("question: %w", err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	ips, rcode := r.lookup(ctx, strings.ToLower(q.Name.String()))
	b.StartQuestions()
	b.Question(q)
	if rcode == dnsmessage.RCodeSuccess && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		b.StartAnswers()
		for _, ip := range ips {
			if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: ip.As4()}); err != nil {
				return nil, fmt.Errorf("answer: %w", err)
			}
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, fmt.Errorf("reply: %w", err)
	}
	msg[3] = msg[3]&0xf0 | byte(rcode) // the builder takes the RCode from the header it was given
	return msg, nil
}

// lookup maps <service>.<namespace>.svc.<domain>. to the Service's cluster
// IP, or a headless Service's ready endpoint addresses.
func (r resolver) lookup(ctx context.Context, name string) ([]netip.Addr, dnsmessage.RCode) {
	if !strings.HasSuffix(name, r.suffix) {
		if strings.HasSuffix(name, strings.TrimPrefix(r.suffix, ".svc")) {
			return nil, dnsmessage.RCodeNameError
		}
		return nil, dnsmessage.RCodeRefused
	}
	parts := strings.Split(strings.TrimSuffix(name, r.suffix), ".")
	if len(parts) != 2 {
		return nil, dnsmessage.RCodeNameError
	}
	svc, err := r.client.CoreV1().Services(parts[1]).Get(ctx, parts[0], metav1.GetOptions{})
	if err != nil {
		return nil, dnsmessage.RCodeNameError
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && ip.Is4() {
		return []netip.Addr{ip}, dnsmessage.RCodeSuccess
	}
	slices, err := r.client.DiscoveryV1().EndpointSlices(parts[1]).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + parts[0]})
	if err != nil {
		return nil, dnsmessage.RCodeServerFailure
	}
	var ips []netip.Addr
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
					ips = append(ips, ip)
				}
			}
		}
	}
	if len(ips) == 0 {
		return nil, dnsmessage.RCodeNameError
	}
	return ips, dnsmessage.RCodeSuccess
}
