package s3blobs_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/s3blobs"
	"github.com/agentd/agentd/store/s3blobs/s3test"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want s3blobs.Config
	}{
		{"s3://bucket", s3blobs.Config{Bucket: "bucket", Endpoint: "s3.amazonaws.com", Secure: true}},
		{"s3://bucket/a/b/?region=eu-west-1", s3blobs.Config{Bucket: "bucket", Prefix: "a/b", Endpoint: "s3.eu-west-1.amazonaws.com", Secure: true, Region: "eu-west-1"}},
		{"s3://my.bucket-1/p?endpoint=http://127.0.0.1:8333", s3blobs.Config{Bucket: "my.bucket-1", Prefix: "p", Endpoint: "127.0.0.1:8333", PathStyle: true}},
		{"s3://bkt?endpoint=https://s3.example:9000&path-style=false&region=r", s3blobs.Config{Bucket: "bkt", Endpoint: "s3.example:9000", Secure: true, Region: "r"}},
		{"s3://bkt/odd%3Fprefix%25?region=us-east-2", s3blobs.Config{Bucket: "bkt", Prefix: "odd?prefix%", Endpoint: "s3.us-east-2.amazonaws.com", Secure: true, Region: "us-east-2"}},
	} {
		got, err := s3blobs.ParseURL(tc.url)
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.url, got, err, tc.want)
			continue
		}
		// String gives a URL that parses back the same.
		if again, err := s3blobs.ParseURL(got.String()); err != nil || again != got {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestParseURLRefusesBadURLs(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "scheme"},
		{"http://bucket/p", `scheme "http" is not s3`},
		{"s3://", "no bucket"},
		{"s3:bucket", "no bucket"},
		{"s3://Bad_Bucket", "not a valid bucket name"},
		{"s3://ab", "not a valid bucket name"},
		{"s3://-bucket", "not a valid bucket name"},
		{"s3://bucket/a//b", "empty segment"},
		{"s3://key:secret@bucket", "credentials do not go in the URL"},
		{"s3://bucket?endpoint=ftp://h", "is not http(s)://HOST[:PORT]"},
		{"s3://bucket?endpoint=http://h/path", "is not http(s)://HOST[:PORT]"},
		{"s3://bucket?endpoint=127.0.0.1:9000", "is not http(s)://HOST[:PORT]"},
		{"s3://bucket?path-style=maybe", "path-style"},
		{"s3://bucket?secret=x", `unknown parameter "secret"`},
		{"s3://bucket?region=a%26b", "region"},
		{"s3://bucket/%zz", "artifacts URL"},
	} {
		_, err := s3blobs.ParseURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q): %v, want an error with %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && strings.Contains(tc.url, "secret@") {
			t.Errorf("ParseURL(%q) repeats the credentials: %v", tc.url, err)
		}
	}
}

// An endpoint nothing listens on fails Open with a clear error, in the
// time the check allows at most.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = s3blobs.Open(t.Context(), "s3://agentd-test?endpoint=http://"+addr)
	if err == nil || !strings.Contains(err.Error(), "bucket not reachable") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open of an unreachable endpoint: %v", err)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

func TestOpenMissingBucket(t *testing.T) {
	cfg, err := s3blobs.ParseURL(s3test.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Bucket = "agentd-no-such-bucket"
	if _, err := s3blobs.OpenConfig(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), `bucket "agentd-no-such-bucket" does not exist`) {
		t.Fatalf("Open of a missing bucket: %v", err)
	}
}

func TestOpenWrongCredentials(t *testing.T) {
	u := s3test.URL(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "agentdwrongkey")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := s3blobs.Open(t.Context(), u); err == nil || !strings.Contains(err.Error(), "bucket not reachable") {
		t.Fatalf("Open with wrong credentials: %v", err)
	}
}

func TestBlobs(t *testing.T) {
	b := s3test.Open(t)
	ctx := t.Context()
	const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if has, err := b.HasBlob(ctx, sha); err != nil || has {
		t.Fatalf("HasBlob before a put: %v, %v", has, err)
	}
	if _, err := b.OpenBlob(ctx, sha, 0, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("OpenBlob before a put: %v, want ErrNotFound", err)
	}
	data := []byte("hello, object store")
	if err := b.PutBlob(ctx, sha, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if has, err := b.HasBlob(ctx, sha); err != nil || !has {
		t.Fatalf("HasBlob after a put: %v, %v", has, err)
	}
	objs := s3test.Objects(t, b)
	if len(objs) != 1 || objs[b.Key(sha)] != int64(len(data)) || !strings.HasSuffix(b.Key(sha), "/sha256/"+sha) {
		t.Fatalf("objects %v", objs)
	}
	rc, err := b.OpenBlob(ctx, sha, 7, 6)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "object" {
		t.Fatalf("range: %q, %v", got, err)
	}
	var listed []string
	if err := b.ListBlobs(ctx, time.Now().Add(time.Minute), func(s string) error { listed = append(listed, s); return nil }); err != nil || len(listed) != 1 || listed[0] != sha {
		t.Fatalf("ListBlobs: %v, %v", listed, err)
	}
	listed = nil
	if err := b.ListBlobs(ctx, time.Now().Add(-time.Hour), func(s string) error { listed = append(listed, s); return nil }); err != nil || len(listed) != 0 {
		t.Fatalf("ListBlobs of older content: %v, %v", listed, err)
	}
	if err := b.DeleteBlob(ctx, sha); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteBlob(ctx, sha); err != nil {
		t.Fatalf("DeleteBlob of absent content: %v", err)
	}
	if objs := s3test.Objects(t, b); len(objs) != 0 {
		t.Fatalf("objects after the delete: %v", objs)
	}
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseURL: any input is parsed or refused with an error, never a
// panic; what parses has a bucket, carries no credentials, and its String
// parses back to the same Config.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket", "s3://bucket/a/b/?region=eu-west-1",
		"s3://my.bucket-1/p?endpoint=http://127.0.0.1:8333",
		"s3://bkt?endpoint=https://s3.example:9000&path-style=false&region=r",
		"s3://bkt/odd%3Fprefix%25?region=us-east-2", "s3://user:pw@bkt", "http://bkt",
		"s3://bkt?endpoint=ftp://x", "s3://bkt//x", "s3://-bad", "s3://bkt?foo=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := s3blobs.ParseURL(raw)
		if err != nil {
			return
		}
		if c.Bucket == "" || c.Endpoint == "" {
			t.Fatalf("ParseURL(%q) = %+v: no bucket or endpoint", raw, c)
		}
		s := c.String()
		if strings.Contains(s, "@") && !strings.Contains(c.Prefix, "@") {
			t.Fatalf("String() of %q holds an @: %q", raw, s)
		}
		again, err := s3blobs.ParseURL(s)
		if err != nil || again != c {
			t.Fatalf("ParseURL(%q) = %+v; its String %q parses to %+v, %v", raw, c, s, again, err)
		}
	})
}
