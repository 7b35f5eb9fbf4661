package session

// WithoutSweep returns c with the take-over sweep left out, for tests of
// the other ways a session is taken over (a message, a start-up).
func WithoutSweep(c Config) Config {
	c.noSweep = true
	return c
}
