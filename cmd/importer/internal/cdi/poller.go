package cdi

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/diskimport/engine/importer"
)

// PollerProgram is the name CDI's DataImportCron controller starts the
// poller as (/usr/bin/cdi-source-update-poller in the importer image): the
// CronJob's pod, under the service account cdi-cronjob, runs
//
//	/usr/bin/cdi-source-update-poller -ns NS -cron NAME -url docker://REF [-certdir /certs]
//
// with IMPORTER_ACCESS_KEY_ID and IMPORTER_SECRET_KEY (the registry's
// secret), INSECURE_TLS and the proxy variables in its environment. It
// resolves the reference to its manifest digest and records it, and the
// time, in the DataImportCron's annotations; the controller imports when
// the digest changed.
const PollerProgram = "cdi-source-update-poller"

// The DataImportCron annotations the poller writes (CDI's names).
const (
	AnnLastCronTime        = "cdi.kubevirt.io/storage.import.lastCronTime"
	AnnSourceDesiredDigest = "cdi.kubevirt.io/storage.import.sourceDesiredDigest"
)

// dataImportCronPath is a DataImportCron's path in the API.
func dataImportCronPath(ns, name string) string {
	return "/apis/cdi.kubevirt.io/v1beta1/namespaces/" + url.PathEscape(ns) + "/dataimportcrons/" + url.PathEscape(name)
}

// Bounds of the poller's two steps: the registry's answer, then the API's.
const (
	pollerDigestTimeout = 5 * time.Minute
	pollerAPITimeout    = 2 * time.Minute
)

// pollerFlags are CDI's poller's flags.
type pollerFlags struct {
	kubeconfig, server, ns, cron, url, certDir string
}

// RunSourceUpdatePoller is the poller pod. Flags are parsed as Go's flag
// package does, as CDI's binary parses them (an unknown flag prints the
// usage and exits 2, -h exits 0); every failure exits 1, as CDI's does,
// with the cause logged and in the termination message. It returns the
// exit code.
func RunSourceUpdatePoller(ctx context.Context, args []string, getenv func(string) string, paths Paths, log *slog.Logger, stderr io.Writer) int {
	fs := flag.NewFlagSet(PollerProgram, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f pollerFlags
	fs.StringVar(&f.kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "(not supported: the pod's service account is used) a kubeconfig file")
	fs.StringVar(&f.server, "server", "", "the API server's https URL (default: KUBERNETES_SERVICE_HOST and _PORT)")
	fs.StringVar(&f.ns, "ns", "", "the DataImportCron's namespace")
	fs.StringVar(&f.cron, "cron", "", "the DataImportCron's name")
	fs.StringVar(&f.url, "url", "", "the registry source, docker://REGISTRY/REPO[:TAG]")
	fs.StringVar(&f.certDir, "certdir", "", "directory of CA certificates the registry's certificate is checked against")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	fail := func(err error) int {
		log.Error("DataImportCron poll failed", "cron", f.ns+"/"+f.cron, "error", err.Error())
		if werr := writeTerminationLog(paths.TerminationLog, []byte(oneLine(err.Error()))); werr != nil {
			log.Warn("termination message not written", "error", werr.Error())
		}
		return ExitFailed
	}
	if f.url == "" || f.ns == "" || f.cron == "" {
		fs.Usage()
		return fail(errors.New("-url, -ns and -cron are required"))
	}
	if f.kubeconfig != "" {
		return fail(fmt.Errorf("-kubeconfig (or KUBECONFIG) %q: not supported; this poller reaches the API server with the pod's service account (%s)", f.kubeconfig, paths.ServiceAccount))
	}
	api, err := inClusterAPI(getenv, paths.ServiceAccount, f.server)
	if err != nil {
		return fail(err)
	}
	digest, err := pollDigest(ctx, f, getenv, paths, log)
	if err != nil {
		return fail(fmt.Errorf("resolving %s: %w", f.url, err))
	}
	log.Info("Digest resolved", "url", f.url, "digest", digest)
	actx, cancel := context.WithTimeout(ctx, pollerAPITimeout)
	defer cancel()
	updated, err := recordDigest(actx, api, f.ns, f.cron, digest, time.Now())
	if err != nil {
		return fail(err)
	}
	msg := "digest " + digest + " unchanged"
	if updated {
		msg = "digest " + digest + " recorded"
	}
	log.Info("DataImportCron polled", "cron", f.ns+"/"+f.cron, "digest", digest, "updated", updated)
	if err := writeTerminationLog(paths.TerminationLog, []byte(msg)); err != nil {
		log.Warn("termination message not written", "error", err.Error())
	}
	return ExitOK
}

// pollDigest resolves the source to its manifest digest with the
// registry settings an importer pod of the same source would have: the
// secret's credentials, INSECURE_TLS, -certdir pooled with the proxy's CAs
// (/proxycerts/, as CDI's poller pools them), the proxy variables.
func pollDigest(ctx context.Context, f pollerFlags, getenv func(string) string, paths Paths, log *slog.Logger) (string, error) {
	var o importer.Options
	o.Username = getenv("IMPORTER_ACCESS_KEY_ID")
	o.Password = getenv("IMPORTER_SECRET_KEY")
	o.AuthFile = getenv("REGISTRY_AUTH_FILE")
	o.RegistriesConf = getenv("CONTAINERS_REGISTRIES_CONF")
	o.CertDir = f.certDir
	o.Logger = log
	var err error
	if o.InsecureTLS, err = envBool(getenv, "INSECURE_TLS"); err != nil {
		return "", err
	}
	req := Request{Import: o}
	defer req.Close()
	if err := trustProxyCerts(getenv, paths, &req); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, pollerDigestTimeout)
	defer cancel()
	return importer.ResolveDigest(ctx, f.url, req.Import)
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// recordDigest reads the DataImportCron and patches, as CDI's poller does
// (a JSON patch), its last-poll time and, when it differs from the one
// recorded, the digest. It reports whether the digest changed.
func recordDigest(ctx context.Context, api *kubeAPI, ns, name, digest string, now time.Time) (bool, error) {
	var cron struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	path := dataImportCronPath(ns, name)
	if err := api.do(ctx, "GET", path, "", nil, &cron); err != nil {
		return false, fmt.Errorf("reading DataImportCron %s/%s: %w", ns, name, err)
	}
	set := map[string]string{AnnLastCronTime: now.UTC().Format(time.RFC3339)}
	updated := digest != "" && cron.Metadata.Annotations[AnnSourceDesiredDigest] != digest
	if updated {
		set[AnnSourceDesiredDigest] = digest
	}
	var patch []jsonPatchOp
	if cron.Metadata.Annotations == nil {
		// "add" into a member that does not exist fails: add the map whole.
		patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: set})
	} else {
		for _, k := range []string{AnnLastCronTime, AnnSourceDesiredDigest} {
			if v, ok := set[k]; ok {
				patch = append(patch, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + jsonPointerEscape(k), Value: v})
			}
		}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return false, err
	}
	if err := api.do(ctx, "PATCH", path, "application/json-patch+json", body, nil); err != nil {
		return false, fmt.Errorf("patching DataImportCron %s/%s: %w", ns, name, err)
	}
	return updated, nil
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901): "~" as
// "~0", "/" as "~1".
func jsonPointerEscape(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}
