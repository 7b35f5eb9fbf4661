package storetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMemStore runs the suite against a correct store: it must pass.
func TestMemStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newMemStore("") })
}

func BenchmarkMemStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return newMemStore("") })
}

// bugEnv names the memStore bug TestBuggyStore runs with.
const bugEnv = "STORETEST_BUG"

// TestBuggyStore runs the suite against a store with the bug named in
// $STORETEST_BUG; TestSuiteCatchesBugs runs it in a child process and
// expects it to fail.
func TestBuggyStore(t *testing.T) {
	bug := os.Getenv(bugEnv)
	if bug == "" {
		t.Skip("run by TestSuiteCatchesBugs")
	}
	storetest.Run(t, func(t *testing.T) store.Store { return newMemStore(bug) })
}

// TestSuiteCatchesBugs checks that each kind of broken store fails the
// subtest meant to catch it.
func TestSuiteCatchesBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	cases := map[string]string{
		"partial-append":              "Events/ConflictRejectsWholeBatch",
		"aliases-payload":             "Events/PayloadIsCopied",
		"drops-actor":                 "Events/RoundTrip",
		"second-timestamps":           "Events/RoundTrip",
		"ignores-limit":               "Events/ReadAfterAndLimit",
		"lists-by-insertion":          "Sessions/ListNewestFirst",
		"update-creates":              "Sessions/UpdateMissingIsErrNotFound",
		"drops-empty-files":           "WorkspaceFiles/SaveListUpsert",
		"drops-profile-mcp":           "Profiles/RoundTripEveryField",
		"release-by-anyone":           "Leases/Release",
		"lease-never-expires":         "Leases/ExpiresAfterTTL",
		"delete-keeps-events":         "DeleteSession/RemovesEverythingOfTheSessionOnly",
		"delete-keeps-lease":          "DeleteSession/RemovesEverythingOfTheSessionOnly",
		"ignores-context":             "Cancellation/CancelledContextFailsWithoutEffect",
		"append-ignores-fence":        "Fencing/StaleAppendRefused",
		"update-ignores-fence":        "Fencing/FencedUpdateSession",
		"fenced-names-first":          "Fencing/GroupCommitNamesEveryStaleSession",
		"generation-grows-on-renewal": "Fencing/GenerationGrowsOnlyWhenTheHolderChanges",
		"takeover-keeps-generation":   "Fencing/GenerationGrowsOnlyWhenTheHolderChanges",
		"release-forgets-generation":  "Fencing/GenerationGrowsOnlyWhenTheHolderChanges",
		"drops-owner":                 "Identity/SessionOwnerRoundTrip",
		"subject-not-unique":          "Identity/Users",
		"revoke-ignored":              "Identity/Tokens",
		"shares-survive-delete":       "Identity/Shares",
		"keys-ignore-scope":           "Identity/ProviderKeys",
		"usage-not-utc":               "Identity/Usage",
		"access-ignores-after":        "Identity/AccessLog",
	}
	for bug, subtest := range cases {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			parts := strings.Split(subtest, "/")
			pattern := "^TestBuggyStore$"
			for _, p := range parts {
				pattern += "/^" + p + "$"
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), bugEnv+"="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store with bug %q; output:\n%s", bug, out)
			}
			if want := "--- FAIL: TestBuggyStore/" + subtest; !strings.Contains(string(out), want) {
				t.Fatalf("bug %q: output lacks %q:\n%s", bug, want, out)
			}
		})
	}
}
