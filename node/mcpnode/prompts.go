package mcpnode

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The one prompt: what the group knows about a topic, with the memories
// recall finds for it already in the message, so the model starts from
// them and cites their keys.
func (s *server) addPrompts() {
	s.srv.AddPrompt(&mcp.Prompt{
		Name: "recall-group", Title: "What does the group know about…",
		Description: "Recall what the group's mesh memory holds about a topic and summarise it with citations.",
		Arguments:   []*mcp.PromptArgument{{Name: "topic", Description: "what to recall", Required: true}},
	}, s.recallPrompt)
}

func (s *server) recallPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	topic := strings.TrimSpace(req.Params.Arguments["topic"])
	if topic == "" || len([]rune(topic)) > MaxQueryChars {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("topic is required, at most %d characters", MaxQueryChars)}
	}
	res, _, err := s.recall(ctx, nil, recallIn{Query: topic})
	if err != nil {
		return nil, readErr(err)
	}
	found := res.Content[0].(*mcp.TextContent).Text
	text := fmt.Sprintf("What does my group already know about %q? Here is what our shared mesh memory (cmbnode) holds:\n\n%s\n"+
		"Summarise what the group knows, citing each memory's key; point out disagreements and what is missing. "+
		"Use the thread tool on a key to see how a memory came about, and remember to keep any new conclusion.", topic, found)
	return &mcp.GetPromptResult{
		Description: "What the group knows about " + topic,
		Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}},
	}, nil
}
