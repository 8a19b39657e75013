function h(s){return String(s).replace(/[&<>"']/g,function(c){return{'&':'&amp;','<':'&lt;',
'>':'&gt;','"':'&#34;',"'":'&#39;'}[c];});}
