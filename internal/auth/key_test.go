package auth

import (
	"context"
	"errors"
	"testing"
)

// The bootstrap key is accepted only whole: not a prefix of it, not the key
// with anything after it, not another key of the same length.
func TestBootstrapKeyOnlyExact(t *testing.T) {
	const key = "s3cret-key"
	s, err := New(Config{BootstrapKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	p, err := s.Authenticate(ctx, key)
	if err != nil || p.UserID != "admin" || p.Method != MethodAPIKey {
		t.Fatalf("the key: %+v %v", p, err)
	}
	for _, c := range []string{
		"s", "s3cret", key[:len(key)-1], // prefixes
		key + "x", key + key, key + " ", // the key and more
		"S3cret-key", "s3cret-kez", "x3cret-key", // same length
		"wrong", " " + key,
	} {
		p, err := s.Authenticate(ctx, c)
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("credential %q: %+v, %v; want ErrUnauthenticated", c, p, err)
		}
	}
}
