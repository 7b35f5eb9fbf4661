// Package s3blobs keeps artifact content in an S3-compatible object store
// (store.ArtifactBlobs): one object per content, named
// PREFIX/sha256/HEX, written once and read with ranged GETs. Which session
// references which content stays in the SQL store that is given it.
package s3blobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentd/agentd/store"
)

// Config is a parsed artifacts URL:
//
//	s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT&region=R&path-style=true
//
// endpoint defaults to https://s3.amazonaws.com (or the region's AWS
// endpoint); path-style (bucket in the path, not the host name) defaults to
// true when an endpoint is given, as S3-compatible servers expect.
// Credentials never come from the URL: they are read from the standard
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)
// variables, or the server is reached anonymously when they are unset.
type Config struct {
	Bucket    string
	Prefix    string // without leading or trailing slash; may be empty
	Endpoint  string // host[:port]
	Secure    bool   // https
	Region    string
	PathStyle bool
}

// ParseURL parses an artifacts URL (see Config).
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("artifacts URL: %w", err)
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("artifacts URL: scheme %q is not s3 (want s3://BUCKET/PREFIX?endpoint=…)", u.Scheme)
	}
	if u.User != nil {
		return Config{}, errors.New("artifacts URL: credentials do not go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if u.Opaque != "" || u.Host == "" {
		return Config{}, errors.New("artifacts URL: no bucket (want s3://BUCKET/PREFIX)")
	}
	c := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Secure: true}
	if !validBucket(c.Bucket) {
		return Config{}, fmt.Errorf("artifacts URL: %q is not a valid bucket name", c.Bucket)
	}
	if strings.Contains(c.Prefix, "//") {
		return Config{}, fmt.Errorf("artifacts URL: prefix %q has an empty segment", c.Prefix)
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "path-style":
		default:
			return Config{}, fmt.Errorf("artifacts URL: unknown parameter %q (known: endpoint, region, path-style)", k)
		}
	}
	c.Region = q.Get("region")
	if strings.Trim(c.Region, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return Config{}, fmt.Errorf("artifacts URL: region %q is not lowercase letters, digits and hyphens", c.Region)
	}
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") || (eu.Path != "" && eu.Path != "/") || eu.RawQuery != "" || eu.User != nil {
			return Config{}, fmt.Errorf("artifacts URL: endpoint %q is not http(s)://HOST[:PORT]", e)
		}
		c.Endpoint, c.Secure, c.PathStyle = eu.Host, eu.Scheme == "https", true
	} else {
		c.Endpoint = "s3.amazonaws.com"
		if c.Region != "" {
			c.Endpoint = "s3." + c.Region + ".amazonaws.com"
		}
	}
	if ps := q.Get("path-style"); ps != "" {
		b, err := strconv.ParseBool(ps)
		if err != nil {
			return Config{}, fmt.Errorf("artifacts URL: path-style %q is not true or false", ps)
		}
		c.PathStyle = b
	}
	return c, nil
}

// validBucket checks S3's bucket naming rules (3 to 63 lowercase letters,
// digits, dots and hyphens, starting and ending with a letter or digit).
func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && ((c != '.' && c != '-') || i == 0 || i == len(b)-1) {
			return false
		}
	}
	return true
}

// String returns the URL without credentials (there are none in it).
func (c Config) String() string {
	scheme := "https"
	if !c.Secure {
		scheme = "http"
	}
	s := "s3://" + c.Bucket
	if c.Prefix != "" {
		s += "/" + (&url.URL{Path: c.Prefix}).EscapedPath()
	}
	// Written out rather than url.Values.Encode: an endpoint's ':' and '/'
	// need no escape in a query, and logs read better without.
	s += "?endpoint=" + scheme + "://" + c.Endpoint + "&path-style=" + strconv.FormatBool(c.PathStyle)
	if c.Region != "" {
		s += "&region=" + c.Region
	}
	return s
}

// Blobs is an S3 bucket holding artifact content. Safe for concurrent use.
type Blobs struct {
	cfg    Config
	client *minio.Client
	tr     *http.Transport
}

var _ store.ArtifactBlobs = (*Blobs)(nil)

// checkTimeout bounds the reachability check of Open.
const checkTimeout = 15 * time.Second

// Open connects to the bucket of an artifacts URL and checks that it is
// reachable and exists (a clear error if not).
func Open(ctx context.Context, rawURL string) (*Blobs, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open with a parsed URL.
func OpenConfig(ctx context.Context, cfg Config) (*Blobs, error) {
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	tr, err := minio.DefaultTransport(cfg.Secure)
	if err != nil {
		return nil, fmt.Errorf("artifacts %s: %w", cfg, err)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewEnvAWS(),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    tr,
	})
	if err != nil {
		return nil, fmt.Errorf("artifacts %s: %w", cfg, err)
	}
	b := &Blobs{cfg: cfg, client: client, tr: tr}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	ok, err := client.BucketExists(cctx, cfg.Bucket)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("artifacts %s: bucket not reachable: %w", cfg, err)
	}
	if !ok {
		b.Close()
		return nil, fmt.Errorf("artifacts %s: bucket %q does not exist", cfg, cfg.Bucket)
	}
	return b, nil
}

// Close releases idle connections.
func (b *Blobs) Close() {
	b.tr.CloseIdleConnections()
}

// Ping checks that the bucket answers.
func (b *Blobs) Ping(ctx context.Context) error {
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	if err == nil && !ok {
		err = fmt.Errorf("bucket %q does not exist", b.cfg.Bucket)
	}
	if err != nil {
		return fmt.Errorf("artifacts %s: %w", b.cfg, err)
	}
	return nil
}

// String implements store.ArtifactBlobs.
func (b *Blobs) String() string { return b.cfg.String() }

// Key returns the object name of the content of sha.
func (b *Blobs) Key(sha string) string { return path.Join(b.cfg.Prefix, "sha256", sha) }

// Prefix returns the prefix of the object names ("" for none).
func (b *Blobs) Prefix() string { return b.cfg.Prefix }

// Bucket returns the bucket's name.
func (b *Blobs) Bucket() string { return b.cfg.Bucket }

// Client returns the S3 client (tests look into the bucket with it).
func (b *Blobs) Client() *minio.Client { return b.client }

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusNotFound || r.Code == minio.NoSuchKey
}

// HasBlob implements store.ArtifactBlobs.
func (b *Blobs) HasBlob(ctx context.Context, sha string) (bool, error) {
	_, err := b.client.StatObject(ctx, b.cfg.Bucket, b.Key(sha), minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if notFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("stat artifact object %s: %w", sha, err)
}

// PutBlob implements store.ArtifactBlobs. A put of more than 16 MiB is a
// multipart upload; from a reader that is an io.ReaderAt (a staged file)
// its parts are read from it as they are sent, not buffered (a 64 MiB put
// allocates a few MiB: s3test's LargePutStreams).
func (b *Blobs) PutBlob(ctx context.Context, sha string, r io.Reader, size int64) error {
	if _, err := b.client.PutObject(ctx, b.cfg.Bucket, b.Key(sha), r, size,
		minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("put artifact object %s: %w", sha, err)
	}
	return nil
}

// OpenBlob implements store.ArtifactBlobs with one ranged GET, whose body
// the reader streams.
func (b *Blobs) OpenBlob(ctx context.Context, sha string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("open artifact object %s: bad range %d+%d", sha, off, n)
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, fmt.Errorf("open artifact object %s: %w", sha, err)
	}
	// The core client does the request now (the plain GetObject would
	// only at the first read) and returns the response's body.
	body, _, _, err := minio.Core{Client: b.client}.GetObject(ctx, b.cfg.Bucket, b.Key(sha), opts)
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("open artifact object %s: %w", sha, store.ErrNotFound)
		}
		return nil, fmt.Errorf("open artifact object %s: %w", sha, err)
	}
	return body, nil
}

// DeleteBlob implements store.ArtifactBlobs.
func (b *Blobs) DeleteBlob(ctx context.Context, sha string) error {
	if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.Key(sha), minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("delete artifact object %s: %w", sha, err)
	}
	return nil
}

// ListBlobs implements store.ArtifactBlobs. Objects under the prefix whose
// names are not a SHA-256 are not agentd's and are skipped.
func (b *Blobs) ListBlobs(ctx context.Context, before time.Time, f func(sha string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine when f fails
	prefix := path.Join(b.cfg.Prefix, "sha256") + "/"
	for o := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("list artifact objects: %w", o.Err)
		}
		sha := strings.TrimPrefix(o.Key, prefix)
		if !store.ValidSHA256(sha) || !o.LastModified.Before(before) {
			continue
		}
		if err := f(sha); err != nil {
			return err
		}
	}
	return ctx.Err()
}
